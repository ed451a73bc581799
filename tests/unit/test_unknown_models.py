"""A CPU or GPU model the catalog does not know: `joulie plan` says so once per model, naming
the inventory, and the model's family key reads like a known one's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from joulie.hardware.catalog import Catalog, model_key
from joulie.hardware.family import hardware_family
from tests.support.builders import inventory_group, inventory_yaml

JOULIE = str(Path(sys.executable).parent / "joulie")
INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "odd.yaml"
    gpu_host = "AMD EPYC 9655 96-Core Processor"
    path.write_text(
        inventory_yaml(
            inventory_group(
                "odd-a", replicas=3, cpu="Unknown CPU 9000", cpu_cores=64, memory_gib=256
            ),
            inventory_group(
                "odd-b", replicas=2, cpu="Unknown CPU 9000", cpu_cores=64, memory_gib=256
            ),
            inventory_group(
                "gpu-x",
                replicas=2,
                cpu=gpu_host,
                cpu_cores=64,
                memory_gib=256,
                product="Tesla-X",
                gpus=4,
            ),
        )
    )
    return path


def plan(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JOULIE, "plan", "--inventory", str(path), "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "HARDWARE_CATALOG_PATH"},
    )


def test_unknown_models_are_warned_about_once_each_naming_the_inventory(tmp_path: Path) -> None:
    path = inventory(tmp_path)
    result = plan(path)
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"joulie: warning: {path}: CPU model 'Unknown CPU 9000' ")
    assert warnings[1].startswith(f"joulie: warning: {path}: GPU model 'Tesla-X' ")
    assert all("not in the hardware catalog" in w for w in warnings)


def test_unknown_models_get_family_keys_of_the_known_form(tmp_path: Path) -> None:
    families = json.loads(plan(inventory(tmp_path)).stdout)["families"]
    assert set(families) == {"cpu:UNKNOWN_9000", "gpu:TESLA_X"}
    assert families["cpu:UNKNOWN_9000"]["nodes"] == 5


def test_a_known_inventory_plans_without_warnings() -> None:
    result = plan(INVENTORIES / "02-cluster-nodes.yaml")
    assert result.returncode == 0
    assert result.stderr == ""


def test_catalog_keys_already_have_the_key_form() -> None:
    catalog = Catalog.load()
    for key in [*catalog.cpus, *catalog.gpus]:
        assert model_key(key) == key
    assert hardware_family("AMD_EPYC_9654", None, 0) == "cpu:AMD_EPYC_9654"
    assert hardware_family(None, None, 2) == "gpu:unknown-gpu"
