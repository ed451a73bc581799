"""A fake NVML for the agent's GPU code: boards with realistic limits, kept as state, and the
refusals a real node produces (limits not supported, no permission, a board lost mid-run).

It implements :class:`joulie.agent.gpu.nvml.NvmlAdapter` in NVML's own units (mW, mJ, MHz). Every
set call is logged in ``calls`` before it is judged, so a test sees attempts as well as effects.
Figures of the scenarios are typical values of the named boards, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from joulie.agent.gpu.errors import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    GpuUnavailable,
)
from joulie.agent.gpu.nvml import ClockInfo

__all__ = [
    "FakeGpu",
    "FakeNvml",
    "a100_sxm",
    "h100_sxm",
    "limits_not_supported_node",
    "no_permission_node",
    "normal_node",
    "unavailable_nvml",
]


@dataclass
class FakeGpu:
    name: str
    uuid: str
    min_mw: int
    max_mw: int
    default_mw: int
    usage_mw: int
    max_clocks: ClockInfo
    graphics_clocks: list[int]
    """Supported graphics clocks, highest first (as NVML lists them)."""
    memory_clocks: list[int]
    limit_mw: int | None = None
    """Current power management limit; None: the default."""
    energy_mj: int | None = 1_000_000
    """Energy counter; None: not supported (pre-Volta)."""
    clocks: ClockInfo | None = None
    """Current clocks; None: idle at the lowest graphics clock."""
    limits_supported: bool = True
    """False: every power-limit call answers NOT_SUPPORTED (GeForce, vGPU, MIG instance)."""
    limit_readable: bool = True
    """False: the limit can be set but not read back."""
    held_limit_mw: int | None = None
    """Another limiter (a BMC, another tool) that puts the limit back to this after each set."""
    limit_step_mw: int = 1
    """The driver keeps the limit rounded to this many mW (1000: whole watts only)."""
    lost: bool = False
    locked_clocks: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.limit_mw is None:
            self.limit_mw = self.default_mw


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    available: bool = True
    """False: as on a node without the driver (every call: GpuUnavailable)."""
    can_set: bool = True
    """False: as for an agent that is not root (every set: GpuNoPermission)."""
    locks_readable: bool = False
    """True: the locked clocks can be read back (:class:`LockedClocksReader`); False: as with
    NVML on most drivers, reading them answers NOT_SUPPORTED."""
    fail: dict[tuple[str, int], GpuError] = field(default_factory=dict)
    """(method, index) -> the error that call raises, for one-off refusals."""
    fail_after: dict[tuple[str, int], GpuError] = field(default_factory=dict)
    """(set method, index) -> the error that set call raises after it has taken effect (a driver
    that applies the value and still answers a failure)."""
    calls: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)
    """Every set call attempted: (method, index, arguments)."""
    initialised: int = 0
    shut_down: int = 0

    # -- lifecycle -------------------------------------------------------------------------

    def init(self) -> None:
        if not self.available:
            raise GpuUnavailable("initialise NVML: NVML Shared Library Not Found", code=12)
        self.initialised += 1

    def shutdown(self) -> None:
        self.shut_down += 1

    def lose(self, index: int) -> None:
        """The board falls off the bus: every later call on it answers GPU_IS_LOST."""
        self.gpus[index].lost = True

    # -- reads -----------------------------------------------------------------------------

    def device_count(self) -> int:
        self._check_available()
        return len(self.gpus)

    def name(self, index: int) -> str:
        return self._gpu("name", index).name

    def uuid(self, index: int) -> str:
        return self._gpu("uuid", index).uuid

    def power_limit_constraints_mw(self, index: int) -> tuple[int, int]:
        gpu = self._limits("power_limit_constraints_mw", index)
        return gpu.min_mw, gpu.max_mw

    def default_power_limit_mw(self, index: int) -> int:
        return self._limits("default_power_limit_mw", index).default_mw

    def power_limit_mw(self, index: int) -> int:
        gpu = self._limits("power_limit_mw", index)
        if not gpu.limit_readable:
            raise GpuNotSupported(f"GPU {index}: read the power limit: Not Supported", code=3)
        assert gpu.limit_mw is not None
        return gpu.limit_mw

    def enforced_power_limit_mw(self, index: int) -> int:
        gpu = self._limits("enforced_power_limit_mw", index)
        assert gpu.limit_mw is not None
        return gpu.limit_mw

    def power_usage_mw(self, index: int) -> int:
        return self._gpu("power_usage_mw", index).usage_mw

    def total_energy_mj(self, index: int) -> int:
        gpu = self._gpu("total_energy_mj", index)
        if gpu.energy_mj is None:
            raise GpuNotSupported(f"GPU {index}: read the energy counter: Not Supported", code=3)
        return gpu.energy_mj

    def clocks_mhz(self, index: int) -> ClockInfo:
        gpu = self._gpu("clocks_mhz", index)
        if gpu.clocks is not None:
            return gpu.clocks
        lowest = min(gpu.graphics_clocks)
        return ClockInfo(graphics_mhz=lowest, memory_mhz=gpu.max_clocks.memory_mhz)

    def max_clocks_mhz(self, index: int) -> ClockInfo:
        return self._gpu("max_clocks_mhz", index).max_clocks

    def supported_memory_clocks_mhz(self, index: int) -> list[int]:
        return list(self._gpu("supported_memory_clocks_mhz", index).memory_clocks)

    def locked_gpu_clocks(self, index: int) -> tuple[int, int] | None:
        gpu = self._gpu("locked_gpu_clocks", index)
        if not self.locks_readable:
            raise GpuNotSupported(f"GPU {index}: read the locked clocks: Not Supported", code=3)
        return gpu.locked_clocks

    def supported_graphics_clocks_mhz(self, index: int, memory_mhz: int) -> list[int]:
        gpu = self._gpu("supported_graphics_clocks_mhz", index)
        if memory_mhz not in gpu.memory_clocks:
            raise GpuInvalidArgument(f"GPU {index}: no memory clock {memory_mhz} MHz", code=2)
        return list(gpu.graphics_clocks)

    # -- writes ----------------------------------------------------------------------------

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self.calls.append(("set_power_limit_mw", index, (milliwatts,)))
        gpu = self._limits("set_power_limit_mw", index)
        self._check_permission(index)
        if not gpu.min_mw <= milliwatts <= gpu.max_mw:
            raise GpuInvalidArgument(
                f"GPU {index}: set the power limit: {milliwatts} mW outside "
                f"[{gpu.min_mw}, {gpu.max_mw}]",
                code=2,
            )
        kept = round(milliwatts / gpu.limit_step_mw) * gpu.limit_step_mw
        gpu.limit_mw = gpu.held_limit_mw if gpu.held_limit_mw is not None else kept
        self._fail_after("set_power_limit_mw", index)

    def set_locked_gpu_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        self.calls.append(("set_locked_gpu_clocks", index, (min_mhz, max_mhz)))
        gpu = self._gpu("set_locked_gpu_clocks", index)
        self._check_permission(index)
        lowest, highest = min(gpu.graphics_clocks), gpu.max_clocks.graphics_mhz
        if min_mhz > max_mhz or min_mhz < lowest or max_mhz > highest:
            raise GpuInvalidArgument(
                f"GPU {index}: clock range {min_mhz}-{max_mhz} outside [{lowest}, {highest}]",
                code=2,
            )
        gpu.locked_clocks = (min_mhz, max_mhz)
        self._fail_after("set_locked_gpu_clocks", index)

    def reset_locked_gpu_clocks(self, index: int) -> None:
        self.calls.append(("reset_locked_gpu_clocks", index, ()))
        gpu = self._gpu("reset_locked_gpu_clocks", index)
        self._check_permission(index)
        gpu.locked_clocks = None
        self._fail_after("reset_locked_gpu_clocks", index)

    def set_calls(self, method: str = "set_power_limit_mw") -> list[tuple[int, tuple[int, ...]]]:
        """The (index, arguments) of every attempt of one setter, in order."""
        return [(index, args) for name, index, args in self.calls if name == method]

    # -- plumbing --------------------------------------------------------------------------

    def _check_available(self) -> None:
        if not self.available:
            raise GpuUnavailable("NVML is not initialised", code=1)

    def _gpu(self, method: str, index: int) -> FakeGpu:
        self._check_available()
        if not 0 <= index < len(self.gpus):
            raise GpuInvalidArgument(f"no GPU {index}", code=2, index=index)
        if (method, index) in self.fail:
            raise self.fail[method, index]
        gpu = self.gpus[index]
        if gpu.lost:
            raise GpuLost(f"GPU {index}: {method}: GPU is lost", code=15, index=index)
        return gpu

    def _limits(self, method: str, index: int) -> FakeGpu:
        gpu = self._gpu(method, index)
        if not gpu.limits_supported:
            raise GpuNotSupported(f"GPU {index}: {method}: Not Supported", code=3, index=index)
        return gpu

    def _fail_after(self, method: str, index: int) -> None:
        if (method, index) in self.fail_after:
            raise self.fail_after[method, index]

    def _check_permission(self, index: int) -> None:
        if not self.can_set:
            raise GpuNoPermission(f"GPU {index}: Insufficient Permissions", code=4, index=index)


# --- boards and scenarios ----------------------------------------------------------------------


def _clock_steps(high: int, low: int, step: int = 15) -> list[int]:
    return list(range(high, low - 1, -step))


def h100_sxm(index: int) -> FakeGpu:
    """An H100 SXM5 80GB board: limits 200-700 W, default 700 W."""
    return FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-6a1f2c3d-0000-4000-8000-00000000000{index}",
        min_mw=200_000,
        max_mw=700_000,
        default_mw=700_000,
        usage_mw=310_000 + 1_000 * index,
        energy_mj=9_000_000_000 + index,
        max_clocks=ClockInfo(graphics_mhz=1980, memory_mhz=2619),
        graphics_clocks=_clock_steps(1980, 345),
        memory_clocks=[2619],
    )


def a100_sxm(index: int) -> FakeGpu:
    """An A100 SXM4 40GB board: limits 100-400 W, default 400 W."""
    return FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid=f"GPU-0c4e5f6a-0000-4000-8000-00000000000{index}",
        min_mw=100_000,
        max_mw=400_000,
        default_mw=400_000,
        usage_mw=62_000 + 1_000 * index,
        energy_mj=4_000_000_000 + index,
        max_clocks=ClockInfo(graphics_mhz=1410, memory_mhz=1215),
        graphics_clocks=_clock_steps(1410, 210),
        memory_clocks=[1215],
    )


def normal_node(count: int = 4, board: str = "h100") -> FakeNvml:
    """``count`` identical boards, limits supported, agent privileged."""
    make = h100_sxm if board == "h100" else a100_sxm
    return FakeNvml(gpus=[make(i) for i in range(count)])


def limits_not_supported_node(count: int = 2) -> FakeNvml:
    """Boards whose power limits read [N/A] (a GeForce card): power draw only, monitor-only."""
    gpus = []
    for i in range(count):
        gpu = FakeGpu(
            name="NVIDIA GeForce RTX 3090",
            uuid=f"GPU-9b8a7c6d-0000-4000-8000-00000000000{i}",
            min_mw=100_000,
            max_mw=350_000,
            default_mw=350_000,
            usage_mw=28_000,
            energy_mj=None,
            max_clocks=ClockInfo(graphics_mhz=2100, memory_mhz=9751),
            graphics_clocks=_clock_steps(2100, 210),
            memory_clocks=[9751],
            limits_supported=False,
        )
        gpus.append(gpu)
    return FakeNvml(gpus=gpus)


def no_permission_node(count: int = 4) -> FakeNvml:
    """Normal boards, but the agent runs without the privilege to set anything."""
    fake = normal_node(count)
    fake.can_set = False
    return fake


def unavailable_nvml() -> FakeNvml:
    """NVML as on a node without the NVIDIA driver."""
    return FakeNvml(gpus=[], available=False)
