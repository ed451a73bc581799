"""The demo's live view and its closing summary, as text (pure: the run passes the figures in)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hack.demo.energy import Booked, Saving
from joulie.cli.status.report import Summary, summary_lines

BAR_WIDTH = 40
CLEAR = "\x1b[H\x1b[2J"


@dataclass
class Placements:
    """Where pods were bound, by the twin class of their node at that moment."""

    performance: dict[str, int] = field(default_factory=dict)
    standard: dict[str, int] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)
    """Performance pods bound to a node whose class keeps them off (eco or draining)."""

    def add(self, pod: str, performance: bool, node_class: str) -> None:
        counts = self.performance if performance else self.standard
        counts[node_class] = counts.get(node_class, 0) + 1
        if performance and node_class in ("eco", "draining"):
            self.wrong.append(pod)


@dataclass
class Frame:
    """What one redraw shows."""

    elapsed_s: float
    duration_s: float
    time_scale: float
    submitted: int
    total_pods: int
    it_power_w: float
    energy_j: float
    cluster: Summary | None
    placements: Placements
    performance_nodes_peak: int
    booked: Saving | None = None
    """The manager's books so far, from its counters (None: not readable)."""


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def progress(done: float) -> str:
    done = min(max(done, 0.0), 1.0)
    filled = round(done * BAR_WIDTH)
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + f"] {done * 100:3.0f}%"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} on {klass}" for klass, n in sorted(counts.items())) or "none yet"


def _pct(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:.1f} %"


def running_saving(booked: Saving | None) -> str:
    """The live view's line on the saving so far."""
    if booked is None:
        return "saved so far: not known (the manager's metrics are not readable)"
    if booked.used_kwh <= 0:
        return "saved so far: nothing booked yet (the manager books each reconcile's node power)"
    return (
        f"saved so far: {booked.saved_kwh:.3f} kWh ({_pct(booked.saved_pct)}); "
        f"booked to pods {booked.used_kwh:.3f} kWh (the manager's books, wall-clock kWh)"
    )


def frame_text(frame: Frame) -> str:
    f = frame
    lines = [
        f"Joulie demo: {f.cluster.nodes if f.cluster else '?'} KWOK nodes, simulated time "
        f"x{f.time_scale:g}",
        f"{progress(f.elapsed_s / f.duration_s)}  {clock(f.elapsed_s)} of "
        f"{clock(f.duration_s)} (simulated {clock(f.elapsed_s * f.time_scale)})",
        f"pods submitted {f.submitted} of {f.total_pods}; IT power {f.it_power_w / 1000:.1f} kW; "
        f"energy so far {f.energy_j / 3.6e6:.1f} kWh (simulated)",
        running_saving(f.booked),
        "",
    ]
    lines += summary_lines(f.cluster) if f.cluster else ["(waiting for the caches)"]
    lines += [
        "",
        f"performance pods placed: {_counts(f.placements.performance)}",
        f"standard pods placed: {_counts(f.placements.standard)}",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Outcome:
    """The run's closing figures (also written as JSON for CI)."""

    duration_s: float
    simulated_s: float
    energy_kwh: float
    mean_it_power_kw: float
    pods_submitted: int
    performance_placed: dict[str, int]
    standard_placed: dict[str, int]
    performance_on_kept_off_nodes: list[str]
    performance_nodes_peak: int
    nodes: int
    deferred_transitions: float
    control_results: dict[str, int]
    booked: Booked | None = None
    """The manager's energy accounts at the end (None: not read, ``booked_problem`` says why)."""
    booked_problem: str = ""
    status_energy: str = ""
    """What `joulie status --energy` printed against the demo cluster before it stopped."""


def _account_line(name: str, s: Saving) -> str:
    return (
        f"    {name}: used {s.used_kwh:.3f} kWh, without Joulie's controls "
        f"{s.without_kwh:.3f} kWh, saved {s.saved_kwh:.3f} kWh ({_pct(s.saved_pct)})"
    )


def energy_lines(o: Outcome) -> list[str]:
    """The answer: energy used, what the same work would have drawn without Joulie's controls,
    and the saving, per workload class and in all; nothing dressed up as a saving when nothing
    was booked."""
    b = o.booked
    if b is None:
        return [
            f"  saving: not known: the manager's energy accounts were not read ({o.booked_problem})"
        ]
    if b.total.used_kwh <= 0:
        return [
            "  saving: none to report: the manager booked no energy to any pod "
            f"(node overhead {b.overhead_kwh:.3f} kWh)"
        ]
    scale = o.simulated_s / o.duration_s if o.duration_s > 0 else 1.0
    lines = [
        "  energy booked to the pods by the manager (simulated watts over wall-clock seconds, as",
        f"  `joulie status --energy` counts it; on the simulated clock each figure is x{scale:g}):",
    ]
    lines += [_account_line(klass, s) for klass, s in b.by_class.items()]
    lines += [
        _account_line("all classes", b.total),
        f"    node overhead, outside the saving (no pod explains it): {b.overhead_kwh:.3f} kWh",
    ]
    if b.source:
        lines.append(f"    read from {b.source}")
    lines.append(
        f"  saving: {b.total.saved_kwh:.3f} kWh ({_pct(b.total.saved_pct)}) of "
        f"{b.total.without_kwh:.3f} kWh the same work would draw without Joulie's controls"
    )
    return lines


def summary_text(o: Outcome) -> str:
    performance = sum(o.performance_placed.values())
    wrong = len(o.performance_on_kept_off_nodes)
    verdict = (
        "all of them on performance nodes"
        if not wrong
        else f"{wrong} on eco or draining nodes: {', '.join(o.performance_on_kept_off_nodes)}"
    )
    results = ", ".join(f"{n} {r}" for r, n in o.control_results.items()) or "none"
    return "\n".join(
        [
            "Joulie demo summary",
            f"  ran {clock(o.duration_s)} (simulated {clock(o.simulated_s)}), "
            f"{o.pods_submitted} pods submitted on {o.nodes} nodes",
            f"  energy used by the nodes: {o.energy_kwh:.1f} kWh (the simulator's count, simulated "
            f"clock), mean IT power {o.mean_it_power_kw:.1f} kW",
            f"  performance pods placed: {performance}, {verdict}",
            f"  standard pods placed: {_counts(o.standard_placed)}",
            f"  performance nodes at the peak: {o.performance_nodes_peak} of {o.nodes}",
            f"  deferred transitions (downgrades held back while performance pods ran): "
            f"{o.deferred_transitions:g}",
            f"  control results reported by the agent: {results}",
            *energy_lines(o),
            *_status_lines(o.status_energy),
        ]
    )


def _status_lines(text: str) -> list[str]:
    if not text:
        return []
    return [
        "  `joulie status --energy` against the demo cluster, before it stopped:",
        *(f"    {line}" if line else "" for line in text.splitlines()),
    ]
