"""The hardware catalog: power facts per CPU and GPU model, and matching of reported model names.

The catalog is a YAML file shipped inside the package
(``joulie/hardware/data/hardware-catalog.yaml``, its sources in the README next to it);
``HARDWARE_CATALOG_PATH`` may point at a replacement with the same layout. :meth:`Catalog.load`
validates the whole file up front and raises :class:`CatalogError` naming the model and the
field, so a bad catalog fails at start-up rather than as a wrong number in the middle of a
simulation.

Model names arrive in many spellings: ``/proc/cpuinfo`` (``Intel(R) Xeon(R) Platinum 8260 CPU @
2.40GHz``), ``nvidia-smi`` (``NVIDIA H100 80GB HBM3``) and label-safe node labels
(``INTEL-R-XEON-R-GOLD-6530``). :func:`normalize_model` reduces every spelling to one token string
and matching compares whole token strings, never substrings, so ``EPYC 9654P`` does not pass for
``EPYC 9654``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from joulie.api.enums import DiscoveryQuality
from joulie.api.yaml_file import YamlFileError, read_yaml_file, yaml_problem

__all__ = [
    "Catalog",
    "CatalogError",
    "CpuSpec",
    "GpuSpec",
    "Match",
    "normalize_model",
]

# The class-default GPU power-cap law, for boards with no fitted one: the knee and the floor as
# shares of the board's dynamic range (max_w - idle_w) above idle, and the throughput exponent.
# Each is the mean of the two boards fitted to Zeus (NSDI '23) measurements, V100 PCIe and A40
# (knee shares 0.50 and 0.59, floor shares 0.00 and 0.15, exponents 0.31 and 0.27).
DEFAULT_KNEE_SHARE = 0.55
DEFAULT_FLOOR_SHARE = 0.08
DEFAULT_CAP_EXPONENT = 0.29
# Cited for the default law when the catalog file does not define the source id itself.
_DEFAULT_LAW_SOURCE_ID = "cap-law-default"
_DEFAULT_LAW_CITATION = (
    "modelling assumption: the mean of the two boards fitted to Zeus (NSDI '23) measurements "
    "(V100 PCIe, A40)"
)
_NOMINAL_ALL_CORE = "nominal (base) clock, no all-core figure published"


class CatalogError(ValueError):
    """A catalog file that cannot be used; the message names the model and the field."""


@dataclass(frozen=True)
class CpuSpec:
    """One CPU model. Watts are per socket.

    ``curve`` comes from whole-server wall measurements (SPECpower) split evenly between the
    sockets, so it includes each socket's share of memory, fans and power-supply losses: its idle
    point is ``idle_w`` and its full-load point may exceed ``tdp_w``. Sockets x curve gives the
    server's power at that load.
    """

    key: str
    vendor: str
    tdp_w: float
    ctdp_min_w: float
    ctdp_max_w: float
    base_ghz: float
    boost_ghz: float
    # Clock sustained with every core busy: the vendor's all-core boost figure where one is
    # published, else base_ghz (the source then says so).
    all_core_ghz: float
    idle_w: float
    cores: int  # physical cores per socket
    # (load %, watts per socket), load increasing; empty when no measured curve is known.
    curve: tuple[tuple[float, float], ...]
    source: str


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Watts are per board.

    The power-cap law: work that would draw ``P`` uncapped, held at a cap ``C`` below ``P``, runs
    at ``y ** cap_exponent`` of its uncapped throughput, ``y = (C - idle_w) / (P - idle_w)``,
    while ``C`` is above the knee (``cap_knee_w``, scaled to the work's draw). Below the knee
    throughput falls linearly to zero at ``cap_floor_w``, so energy per unit of work rises again.
    Always populated: a fitted law where the catalog has one, else the class default built from
    ``DEFAULT_KNEE_SHARE``, ``DEFAULT_FLOOR_SHARE`` and ``DEFAULT_CAP_EXPONENT``.
    """

    key: str
    vendor: str
    min_w: float
    max_w: float
    default_w: float
    idle_w: float
    dense_tensor_tflops: float  # peak dense FP16/BF16 tensor (matrix) throughput, no sparsity
    memory_bandwidth_gbs: float  # GB/s
    cap_knee_w: float
    cap_floor_w: float
    cap_exponent: float
    source: str


@dataclass(frozen=True)
class Match:
    """The outcome of matching one reported model name against the catalog.

    ``key`` is the catalog key when ``quality`` is exact, otherwise None; ``raw`` is the reported
    string as given ("" when nothing was reported).
    """

    key: str | None
    quality: DiscoveryQuality
    raw: str


_QUALITY_RANK = (DiscoveryQuality.EXACT, DiscoveryQuality.HEURISTIC, DiscoveryQuality.UNAVAILABLE)


def overall_quality(*qualities: DiscoveryQuality) -> DiscoveryQuality:
    """NodeHardware ``quality.overall`` of a node: as good as its least recognised device class
    (``exact`` only when every model present was recognised)."""
    return max(qualities, key=_QUALITY_RANK.index, default=DiscoveryQuality.UNAVAILABLE)


# --- normalisation -----------------------------------------------------------------------------

# Everything but letters, digits and dots separates tokens. That covers spaces, "-" and "_"
# (label-safe forms), "(R)"/"(TM)" brackets, "®"/"™", "@" and "+" (which label values cannot
# carry, so "8480+" has to match its label-safe "8480").
_SEPARATORS = re.compile(r"[^a-z0-9.]+")
# Tokens that say nothing about the model: trademark marks and the generic nouns vendors add.
_NOISE = frozenset({"r", "tm", "cpu", "processor"})
# Intel appends the base clock ("CPU @ 2.40GHz"); it is implied by the model number.
_CLOCK = re.compile(r"\d+(?:\.\d+)?ghz")


@functools.lru_cache(maxsize=4096)
def normalize_model(raw: str) -> str:
    """The canonical lowercase token string of a model name, used for matching.

    Drops trademark marks, "CPU", "Processor", a clock suffix and AMD's "<N>-Core" (the core count
    is implied by the model number), then joins the remaining tokens with single spaces:
    ``AMD EPYC 9654 96-Core Processor`` and ``AMD-EPYC-9654-96-Core-Processor`` both give
    ``amd epyc 9654``. Cached: a cluster reports a handful of distinct names thousands of times.
    """
    tokens: list[str] = []
    for token in _SEPARATORS.split(raw.lower()):
        token = token.strip(".")
        if not token or token in _NOISE or _CLOCK.fullmatch(token):
            continue
        if token == "core" and tokens and tokens[-1].isdigit():
            tokens.pop()  # "96-Core": the count belongs to the model number already
            continue
        tokens.append(token)
    return " ".join(tokens)


def model_key(name: str) -> str:
    """The key form of a model name: its normalised tokens in upper case, joined by ``_``.

    The catalog's own keys already have this form (``AMD_EPYC_9654``, a test keeps them so), so
    one function names the families of recognised and unrecognised models alike:
    ``Unknown CPU 9000`` gives ``UNKNOWN_9000``, usable in logs and JSON like any catalog key.
    Two names that give one key match the same catalog entry, so an unrecognised model never
    takes a recognised one's key. Empty for a name with no model in it.
    """
    return normalize_model(name).upper().replace(" ", "_")


# --- the file format (validated with pydantic, then turned into the frozen specs) ---------------

_Watts = Annotated[float, Field(gt=0)]
_Name = Annotated[str, StringConstraints(min_length=1)]
_Vendor = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Curve(_Strict):
    sockets: Annotated[int, Field(ge=1)]
    points: Annotated[list[tuple[float, float]], Field(min_length=2)]


class _CpuSource(_Strict):
    spec: _Name
    idle: _Name
    curve: _Name | None = None
    all_core: _Name | None = None


class _GpuSource(_Strict):
    power: _Name
    min: _Name
    idle: _Name
    compute: _Name
    memory: _Name
    law: _Name | None = None


class _CapLaw(_Strict):
    knee_w: _Watts
    floor_w: _Watts
    exponent: float


class _CpuEntry(_Strict):
    vendor: _Vendor
    aliases: list[_Name] = []
    cores: Annotated[int, Field(ge=1)]
    base_ghz: Annotated[float, Field(gt=0)]
    boost_ghz: Annotated[float, Field(gt=0)]
    all_core_ghz: Annotated[float, Field(gt=0)] | None = None
    tdp_w: _Watts
    ctdp_w: tuple[_Watts, _Watts] | None = None
    idle_w: _Watts
    curve: _Curve | None = None
    source: _CpuSource


class _GpuEntry(_Strict):
    vendor: _Vendor
    aliases: list[_Name] = []
    min_w: _Watts
    max_w: _Watts
    default_w: _Watts
    idle_w: _Watts
    dense_tensor_tflops: Annotated[float, Field(gt=0)]
    memory_bandwidth_gbs: Annotated[float, Field(gt=0)]
    cap_law: _CapLaw | None = None
    source: _GpuSource


class _CatalogFile(_Strict):
    catalog_version: int
    sources: dict[_Name, _Name]
    cpus: dict[_Name, _CpuEntry] = {}
    gpus: dict[_Name, _GpuEntry] = {}


# Builds the error for (field, problem) of one model, so checks need not repeat its key.
_Failure = Callable[[str, str], CatalogError]

_SUPPORTED_VERSION = 1
_EMBEDDED = "hardware-catalog.yaml"


class Catalog:
    """CPU and GPU models by catalog key, with name matching. Immutable once built."""

    __slots__ = ("_cpu_index", "_gpu_index", "cpus", "gpus")

    cpus: Mapping[str, CpuSpec]
    gpus: Mapping[str, GpuSpec]

    def __init__(
        self,
        cpus: Mapping[str, CpuSpec],
        gpus: Mapping[str, GpuSpec],
        cpu_aliases: Mapping[str, Iterable[str]] | None = None,
        gpu_aliases: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """Build a catalog from specs; every key also matches as its own alias.

        Raises CatalogError when two models share a normalised name, because a reported name
        must resolve to one model, never to whichever happens to be found first.
        """
        self.cpus = MappingProxyType(dict(cpus))
        self.gpus = MappingProxyType(dict(gpus))
        self._cpu_index = _index("cpus", self.cpus, cpu_aliases or {})
        self._gpu_index = _index("gpus", self.gpus, gpu_aliases or {})

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalog:
        """Read and validate a catalog file; None (or "") reads the embedded catalog."""
        if path is None or str(path) == "":
            return _embedded()
        try:
            data = read_yaml_file(Path(path), "the hardware catalog")
        except YamlFileError as exc:
            raise CatalogError(str(exc)) from None
        return _build(data, str(path))

    def match_cpu(self, raw: str | None) -> Match:
        """Resolve a reported CPU model name to a catalog key."""
        return _match(self._cpu_index, raw)

    def match_gpu(self, raw: str | None) -> Match:
        """Resolve a reported GPU model name to a catalog key."""
        return _match(self._gpu_index, raw)

    def cpu(self, key: str) -> CpuSpec:
        """The CPU model under a catalog key; KeyError when there is none."""
        return self.cpus[key]

    def gpu(self, key: str) -> GpuSpec:
        """The GPU model under a catalog key; KeyError when there is none."""
        return self.gpus[key]

    def __repr__(self) -> str:
        return f"Catalog(cpus={sorted(self.cpus)}, gpus={sorted(self.gpus)})"


def _match(index: Mapping[str, str], raw: str | None) -> Match:
    if raw is None or not raw.strip():
        return Match(key=None, quality=DiscoveryQuality.UNAVAILABLE, raw=raw or "")
    key = index.get(normalize_model(raw))
    quality = DiscoveryQuality.EXACT if key is not None else DiscoveryQuality.HEURISTIC
    return Match(key=key, quality=quality, raw=raw)


def _index(
    section: str, models: Mapping[str, object], aliases: Mapping[str, Iterable[str]]
) -> dict[str, str]:
    """Normalised name -> key, refusing names that are empty or claimed by two models."""
    index: dict[str, str] = {}
    for key in models:
        for name in (key, *aliases.get(key, ())):
            norm = normalize_model(name)
            if not norm:
                raise CatalogError(f"{section}.{key}.aliases: {name!r} has no model name in it")
            owner = index.setdefault(norm, key)
            if owner != key:
                raise CatalogError(
                    f"{section}.{key}.aliases: {name!r} reads as {norm!r}, "
                    f"which already names {owner}"
                )
    return index


@functools.cache
def _embedded() -> Catalog:
    # Built once per process: the embedded file cannot change while we run.
    text = resources.files("joulie.hardware").joinpath("data", _EMBEDDED).read_text()
    return _parse(text, f"embedded {_EMBEDDED}")


def _parse(text: str, source: str) -> Catalog:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not valid YAML {yaml_problem(exc)}") from None
    return _build(data, source)


def _build(data: Any, source: str) -> Catalog:
    if not isinstance(data, dict):
        raise CatalogError(
            f"{source}: expected a mapping with catalog_version, sources, cpus, gpus"
        )
    try:
        parsed = _CatalogFile.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(_describe(exc, source)) from None
    if parsed.catalog_version != _SUPPORTED_VERSION:
        raise CatalogError(
            f"{source}: catalog_version: {parsed.catalog_version} is not supported "
            f"(this build reads version {_SUPPORTED_VERSION})"
        )
    try:
        cpus = {key: _cpu_spec(key, entry, parsed.sources) for key, entry in parsed.cpus.items()}
        gpus = {key: _gpu_spec(key, entry, parsed.sources) for key, entry in parsed.gpus.items()}
        return Catalog(
            cpus,
            gpus,
            cpu_aliases={key: entry.aliases for key, entry in parsed.cpus.items()},
            gpu_aliases={key: entry.aliases for key, entry in parsed.gpus.items()},
        )
    except CatalogError as exc:
        raise CatalogError(f"{source}: {exc}") from None


def _cpu_spec(key: str, entry: _CpuEntry, sources: Mapping[str, str]) -> CpuSpec:
    def fail(field: str, problem: str) -> CatalogError:
        return CatalogError(f"cpus.{key}.{field}: {problem}")

    if entry.boost_ghz < entry.base_ghz:
        raise fail("boost_ghz", f"{entry.boost_ghz} is below base_ghz {entry.base_ghz}")
    ctdp_min, ctdp_max = entry.ctdp_w if entry.ctdp_w is not None else (entry.tdp_w, entry.tdp_w)
    if not ctdp_min <= entry.tdp_w <= ctdp_max:
        raise fail("ctdp_w", f"[{ctdp_min}, {ctdp_max}] does not contain tdp_w {entry.tdp_w}")
    if entry.idle_w >= entry.tdp_w:
        raise fail("idle_w", f"{entry.idle_w} is not below tdp_w {entry.tdp_w}")
    curve: tuple[tuple[float, float], ...] = ()
    if entry.curve is not None:
        _check_curve(entry.curve.points, fail)
        if entry.source.curve is None:
            raise fail("source.curve", "a measured curve needs a source")
        # Published curves may cover a whole multi-socket server; the spec is per socket.
        sockets = entry.curve.sockets
        curve = tuple((load, watts / sockets) for load, watts in entry.curve.points)
    elif entry.source.curve is not None:
        raise fail("source.curve", "names a source but the model has no curve")
    all_core_ghz = _all_core_ghz(entry, fail)
    citation = _cite(entry.source.model_dump(exclude_none=True), sources, fail)
    if entry.all_core_ghz is None:
        citation += f"; all_core: {_NOMINAL_ALL_CORE}"
    return CpuSpec(
        key=key,
        vendor=entry.vendor,
        tdp_w=entry.tdp_w,
        ctdp_min_w=ctdp_min,
        ctdp_max_w=ctdp_max,
        base_ghz=entry.base_ghz,
        boost_ghz=entry.boost_ghz,
        all_core_ghz=all_core_ghz,
        idle_w=entry.idle_w,
        cores=entry.cores,
        curve=curve,
        source=citation,
    )


def _all_core_ghz(entry: _CpuEntry, fail: _Failure) -> float:
    """The published all-core clock, checked against base and boost; base_ghz where none is."""
    if entry.all_core_ghz is None:
        if entry.source.all_core is not None:
            raise fail("source.all_core", "names a source but the model has no all_core_ghz")
        return entry.base_ghz
    if entry.source.all_core is None:
        raise fail("source.all_core", "a published all_core_ghz needs a source")
    if not entry.base_ghz <= entry.all_core_ghz <= entry.boost_ghz:
        raise fail(
            "all_core_ghz",
            f"{entry.all_core_ghz} is outside [base_ghz, boost_ghz] = "
            f"[{entry.base_ghz}, {entry.boost_ghz}]",
        )
    return entry.all_core_ghz


def _gpu_spec(key: str, entry: _GpuEntry, sources: Mapping[str, str]) -> GpuSpec:
    def fail(field: str, problem: str) -> CatalogError:
        return CatalogError(f"gpus.{key}.{field}: {problem}")

    if entry.min_w > entry.max_w:
        raise fail("min_w", f"{entry.min_w} is above max_w {entry.max_w}")
    if not entry.min_w <= entry.default_w <= entry.max_w:
        raise fail(
            "default_w",
            f"{entry.default_w} is outside [min_w, max_w] = [{entry.min_w}, {entry.max_w}]",
        )
    if entry.idle_w >= entry.max_w:
        raise fail("idle_w", f"{entry.idle_w} is not below max_w {entry.max_w}")
    knee, floor, exponent = _cap_law(entry, fail)
    citation = _cite(entry.source.model_dump(exclude_none=True), sources, fail)
    if entry.cap_law is None:
        default = sources.get(_DEFAULT_LAW_SOURCE_ID, _DEFAULT_LAW_CITATION)
        citation += f"; law: {default}"
    return GpuSpec(
        key=key,
        vendor=entry.vendor,
        min_w=entry.min_w,
        max_w=entry.max_w,
        default_w=entry.default_w,
        idle_w=entry.idle_w,
        dense_tensor_tflops=entry.dense_tensor_tflops,
        memory_bandwidth_gbs=entry.memory_bandwidth_gbs,
        cap_knee_w=knee,
        cap_floor_w=floor,
        cap_exponent=exponent,
        source=citation,
    )


def _cap_law(entry: _GpuEntry, fail: _Failure) -> tuple[float, float, float]:
    """(knee_w, floor_w, exponent): the fitted law, or the class default from idle_w and max_w.

    Either way it must describe a usable curve: the floor at or above idle and below the lowest
    cap the driver accepts (else a legal cap would stop the board), the knee between the floor
    and max_w, and an exponent in (0, 1) (throughput falls slower than power).
    """
    law = entry.cap_law
    if law is None:
        if entry.source.law is not None:
            raise fail("source.law", "names a source but the model has no cap_law")
        span = entry.max_w - entry.idle_w
        knee = entry.idle_w + DEFAULT_KNEE_SHARE * span
        floor = entry.idle_w + DEFAULT_FLOOR_SHARE * span
        exponent = DEFAULT_CAP_EXPONENT
        how = " (class default)"
    else:
        if entry.source.law is None:
            raise fail("source.law", "a fitted cap_law needs a source")
        knee, floor, exponent = law.knee_w, law.floor_w, law.exponent
        how = ""
    if not entry.idle_w <= floor < entry.min_w:
        raise fail(
            "cap_law.floor_w",
            f"{floor:g}{how} is outside [idle_w, min_w) = [{entry.idle_w:g}, {entry.min_w:g})",
        )
    if not floor < knee < entry.max_w:
        raise fail(
            "cap_law.knee_w",
            f"{knee:g}{how} is outside (floor_w, max_w) = ({floor:g}, {entry.max_w:g})",
        )
    if not 0 < exponent < 1:
        raise fail("cap_law.exponent", f"{exponent:g}{how} is outside (0, 1)")
    return knee, floor, exponent


def _check_curve(points: list[tuple[float, float]], fail: _Failure) -> None:
    """Loads strictly increasing within [0, 100]; watts positive and never falling with load."""
    previous: tuple[float, float] | None = None
    for i, (load, watts) in enumerate(points):
        where = f"curve.points[{i}]"
        if not 0 <= load <= 100:
            raise fail(where, f"load {load} % is outside [0, 100]")
        if watts <= 0:
            raise fail(where, f"power {watts} W is not positive")
        if previous is not None:
            if load <= previous[0]:
                raise fail(where, f"load {load} % does not increase (previous {previous[0]} %)")
            if watts < previous[1]:
                raise fail(where, f"power {watts} W falls below the previous {previous[1]} W")
        previous = (load, watts)


def _cite(ids: Mapping[str, str], sources: Mapping[str, str], fail: _Failure) -> str:
    """ "spec: <citation>; idle: <citation>; ..." from the source ids of one model."""
    parts = []
    for what, source_id in ids.items():
        if source_id not in sources:
            raise fail(f"source.{what}", f"{source_id!r} is not listed under sources")
        parts.append(f"{what}: {sources[source_id]}")
    return "; ".join(parts)


def _describe(exc: ValidationError, source: str) -> str:
    """One line per problem: the file, then section.MODEL.field, then what is wrong."""
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"])
        lines.append(f"{source}: {field or '<top level>'}: {err['msg']}")
    return "\n".join(lines)
