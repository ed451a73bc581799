"""A DaemonSet agent's node in process: a fake Intel tree (with a boot id, so a baseline can be
kept) and the :class:`~joulie.agent.host_node.HostNode` over it, with a fake NVML when given."""

from __future__ import annotations

from pathlib import Path

from joulie.agent.baseline import BOOT_ID_PATH, Baseline
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.host_node import HostNode
from joulie.hardware.catalog import Catalog
from tests.support.fake_nvml import FakeNvml
from tests.support.fake_sysfs import FakeSysfs
from tests.support.sysfs_trees import intel_xeon_8260

__all__ = ["BOOT_ID", "host_node", "host_tree"]

BOOT_ID = "11111111-2222-3333-4444-555555555555"


def host_tree(root: Path) -> FakeSysfs:
    """A two-socket Xeon node under ``root / "root"``."""
    fake = intel_xeon_8260(root / "root")
    fake.put(BOOT_ID_PATH, BOOT_ID)
    return fake


def host_node(
    fake: FakeSysfs,
    state: Path,
    *,
    nvml: FakeNvml | None = None,
    dry_run: bool = False,
    governor_writes: bool = True,
) -> HostNode:
    """The node's hardware as the agent controls it, its baseline kept in ``state``."""
    return HostNode(
        fake,
        Baseline.load(state, fake),
        Catalog.load(),
        gpus=GpuBackends.of(fake, nvml),
        dry_run=dry_run,
        governor_writes=governor_writes,
        discovery_interval_s=600,
    )
