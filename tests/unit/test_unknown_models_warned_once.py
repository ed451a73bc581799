"""A CPU or GPU model the catalog does not know is simulated and planned as generic parts, and
the user is told once per model (its kind, its name and how many nodes have it): by `joulie
simulate` before any run starts, however many baselines, seeds and workers; by `joulie plan`
on stderr beside a plan that stays valid JSON; by the controller manager once per process.

The models below are fictional, so that a catalog growing never makes them known.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from joulie.api import keys
from joulie.cli import main as cli
from joulie.hardware.catalog import Catalog
from joulie.hardware.recognition import hardware_view
from joulie.hardware.unknown_models import (
    MAX_REMEMBERED,
    WARNED,
    Kind,
    UnknownModel,
    WarnedOnce,
    unknown_models,
    unknown_parts,
)
from joulie.kube.client import KubeClient
from joulie.manager.cache import ClusterCache
from joulie.manager.planner import Planner
from joulie.manager.settings import ManagerSettings
from tests.support.builders import inventory_group, inventory_yaml, node, node_group

CATALOG = Catalog.load()
ODD_CPU = "Zephyr ZX-9999"
ODD_GPU = "NVIDIA Quantum Q9000"
KNOWN_CPU = "AMD EPYC 9534 64-Core Processor"
KNOWN_GPU = "NVIDIA L40S"


def group(prefix: str, replicas: int, cpu: str, product: str = "", gpus: int = 0) -> dict[str, Any]:
    return inventory_group(
        prefix, replicas=replicas, cpu=cpu, cpu_cores=32, memory_gib=256, product=product, gpus=gpus
    )


def odd_inventory(tmp_path: Path) -> Path:
    """Three unknown models: a CPU on 5 nodes (in two spellings), a GPU on 3 nodes, and 2
    nodes whose GPU model is not given ("?" leaves no model in the label)."""
    path = tmp_path / "odd.yaml"
    path.write_text(
        inventory_yaml(
            group("q", 3, ODD_CPU, product=ODD_GPU, gpus=4),
            group("c", 2, "ZEPHYR-ZX-9999"),
            group("u", 2, KNOWN_CPU, product="?", gpus=2),
            group("k", 1, KNOWN_CPU, product=KNOWN_GPU, gpus=2),
        )
    )
    return path


def known_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "known.yaml"
    path.write_text(
        inventory_yaml(
            group("k", 2, KNOWN_CPU, product=KNOWN_GPU, gpus=2), group("c", 1, KNOWN_CPU)
        )
    )
    return path


EXPECTED = [
    f"CPU model {ODD_CPU!r} is not in the hardware catalog (5 nodes): {{}} as generic parts",
    f"GPU model {ODD_GPU!r} is not in the hardware catalog (3 nodes): {{}} as generic parts",
    "GPU model not given (2 nodes): {} as generic parts",
]


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    WARNED.clear()
    yield
    WARNED.clear()


# --- the rule ----------------------------------------------------------------------------------


def test_sightings_of_one_model_are_one_entry_with_their_nodes_added_up() -> None:
    seen: list[tuple[Kind, str | None, int]] = [
        ("GPU", ODD_GPU, 3),
        ("CPU", ODD_CPU, 1),
        ("GPU", "nvidia-quantum-q9000", 2),
        ("GPU", None, 1),
        ("GPU", "  ", 4),
        ("CPU", None, 2),
    ]
    found = unknown_models(seen)
    assert found == [
        UnknownModel("GPU", ODD_GPU, 5),
        UnknownModel("CPU", ODD_CPU, 1),
        UnknownModel("GPU", None, 5),
        UnknownModel("CPU", None, 2),
    ]
    assert found[0].describe() == EXPECTED[1].replace("3 nodes", "5 nodes").format("simulated")
    assert (
        UnknownModel("CPU", ODD_CPU, 1)
        .describe("planned")
        .endswith("(1 node): planned as generic parts")
    )


def test_a_known_model_is_no_unknown_part_and_an_odd_one_is() -> None:
    def view(cpu: str, product: str = "", gpus: int = 0) -> Any:
        g = node_group(
            node_name="n", cpu=cpu, cpu_sockets=1, cpu_cores=8, memory_gib=32, product=product,
            gpus=gpus,
        )  # fmt: skip
        return hardware_view(None, g.hardware_labels(), {}, g.capacity(), CATALOG)

    assert unknown_parts(view(KNOWN_CPU, KNOWN_GPU, 2), CATALOG) == []
    assert unknown_parts(view(KNOWN_CPU), CATALOG) == []
    assert unknown_parts(view(ODD_CPU, ODD_GPU, 1), CATALOG) == [
        ("CPU", "Zephyr-ZX-9999"),
        ("GPU", "NVIDIA-Quantum-Q9000"),
    ]
    assert unknown_parts(view(KNOWN_CPU, "?", 1), CATALOG) == [("GPU", None)]


def test_the_registry_lets_each_model_through_once() -> None:
    models = unknown_models([("GPU", ODD_GPU, 3), ("GPU", None, 1)])
    assert WARNED.first_time(models) == models
    assert WARNED.first_time(unknown_models([("GPU", "NVIDIA-QUANTUM-Q9000", 9)])) == []
    assert WARNED.first_time(models) == []


# --- joulie simulate ---------------------------------------------------------------------------


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


def test_simulate_warns_once_per_model_across_baselines_seeds_and_workers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = odd_inventory(tmp_path)
    argv = ["simulate", "--inventory", str(path), "--hours", "1", "--baselines", "A,B"]
    # --workers 2: what the worker processes write to the same stderr is captured too.
    code = cli([*argv, "--seeds", "1,2", "--workers", "2", "--format", "json", "-q"])
    out, err = capfd.readouterr()
    assert code == 0, err
    prefix = f"joulie simulate: warning: {path}: "
    assert warnings(err) == [prefix + line.format("simulated") for line in EXPECTED]
    assert len(json.loads(out)) == 4


def test_simulate_says_nothing_of_known_models(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = known_inventory(tmp_path)
    code = cli(["simulate", "--inventory", str(path), "--hours", "1", "--baselines", "A", "-q"])
    _, err = capfd.readouterr()
    assert code == 0, err
    assert warnings(err) == []


# --- joulie plan -------------------------------------------------------------------------------


def plan(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli(["plan", "--inventory", str(path), "--output", "json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_warns_once_per_model_on_stderr_and_prints_json_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARDWARE_CATALOG_PATH", raising=False)
    path = odd_inventory(tmp_path)
    code, out, err = plan(path, capsys)
    assert code == 0, err
    prefix = f"joulie: warning: {path}: "
    assert err.splitlines() == [prefix + line.format("planned") for line in EXPECTED]
    assert json.loads(out)["node_count"] == 8
    # A second plan in the same process says it again: each command warns about its inventory.
    assert warnings(plan(path, capsys)[2]) == err.splitlines()

    code, out, err = plan(known_inventory(tmp_path), capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["node_count"] == 3


# --- the controller manager --------------------------------------------------------------------


def node_events(
    prefix: str, replicas: int, cpu: str, product: str = "", gpus: int = 0
) -> list[Any]:
    g = node_group(
        prefix, replicas=replicas, cpu=cpu, cpu_sockets=1, cpu_cores=32, memory_gib=256,
        product=product, gpus=gpus,
    )  # fmt: skip
    labels = {**g.hardware_labels(), keys.MANAGED_LABEL: "true"}
    return [
        {"type": "ADDED", "object": node(name, rv=1, labels=labels, allocatable=g.capacity())}
        for name in g.node_names()
    ]


def test_the_manager_logs_each_unknown_model_once_per_process() -> None:
    settings = ManagerSettings.from_env({}).settings
    cache = ClusterCache(cast(KubeClient, object()), "joulie-manager", lambda: None)
    for event in [
        *node_events("q", 3, ODD_CPU, product=ODD_GPU, gpus=4),
        *node_events("k", 2, KNOWN_CPU, product=KNOWN_GPU, gpus=2),
        # No GPU model and no NodeHardware yet: the agent has not had its say, so no warning.
        *node_events("u", 1, KNOWN_CPU, product="?", gpus=1),
    ]:
        cache.nodes._apply(event)
    with capture_logs() as logs:
        planner = Planner(settings, cache, CATALOG)
        planner.planned()
        planner.planned()
        for event in node_events("q2", 2, ODD_CPU, product=ODD_GPU, gpus=4):
            cache.nodes._apply(event)
        planner.planned()
        Planner(settings, cache, CATALOG).planned()  # a new term: the same process
    found = [
        (e["log_level"], e["kind"], e["model"], e["nodes"])
        for e in logs
        if e["event"] == "hardware model not in the catalog, planned as generic parts"
    ]
    assert found == [
        ("warning", "CPU", "Zephyr-ZX-9999", 3),
        ("warning", "GPU", "NVIDIA-Quantum-Q9000", 3),
    ]


def test_the_registry_remembers_a_bounded_number_of_models() -> None:
    registry = WarnedOnce()
    many = [UnknownModel("GPU", f"Quantum Q{i}", 1) for i in range(MAX_REMEMBERED + 10)]
    assert len(registry.first_time(many)) == MAX_REMEMBERED
    assert registry.first_time(many) == []
