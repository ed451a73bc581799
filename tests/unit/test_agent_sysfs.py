"""Kernel interface files under a fake root: values read back as written, and each failure the
agent must tell apart (absent, locked, refused, garbled) named as such."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from joulie.agent.sysfs import ErrorKind, Sysfs, SysfsError
from tests.support.fake_sysfs import FakeSysfs

LIMIT = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"


@pytest.fixture
def tree(tmp_path: Path) -> Sysfs:
    path = tmp_path / LIMIT.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("165000000\n")
    return Sysfs(tmp_path)


def test_a_shorter_value_replaces_the_old_one(tree: Sysfs) -> None:
    assert tree.read_int(LIMIT) == 165_000_000
    tree.write(LIMIT, "99000000")
    assert tree.read_int(LIMIT) == 99_000_000


def test_missing_files_are_missing_not_errors_of_the_agent(tree: Sysfs) -> None:
    with pytest.raises(SysfsError) as caught:
        tree.read("/sys/class/powercap/intel-rapl:1/name")
    assert caught.value.kind is ErrorKind.MISSING
    assert tree.try_read("/sys/class/powercap/intel-rapl:1/name") is None
    with pytest.raises(SysfsError) as refused:
        tree.write("/sys/class/powercap/intel-rapl:1/enabled", "1")  # never created
    assert refused.value.kind is ErrorKind.MISSING
    assert not tree.exists("/sys/class/powercap/intel-rapl:1/enabled")


def test_kernel_refusals_are_told_apart(tmp_path: Path) -> None:
    tree = FakeSysfs(tmp_path)
    tree.put(LIMIT, 165000000)
    tree.refuse("/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw", errno.EACCES)
    with pytest.raises(SysfsError) as locked:
        tree.write(LIMIT, "1")
    assert locked.value.kind is ErrorKind.PERMISSION
    governor = "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
    tree.put(governor, "powersave")
    tree.refuse_when(governor, lambda value: value != "performance", errno.EINVAL)
    with pytest.raises(SysfsError) as refused:
        tree.write(governor, "turbo")
    assert refused.value.kind is ErrorKind.REJECTED
    tree.write(governor, "performance")
    assert tree.read(governor) == "performance"
    assert tree.read_int(LIMIT) == 165000000  # a refused write changes nothing
    assert [value for _, value in tree.writes] == ["1", "turbo", "performance"]


def test_garbage_is_invalid(tree: Sysfs) -> None:
    tree.path(LIMIT).write_text("n/a\n")
    with pytest.raises(SysfsError) as caught:
        tree.read_int(LIMIT)
    assert caught.value.kind is ErrorKind.INVALID
    assert LIMIT in str(caught.value)


def test_listdir_is_sorted_and_empty_when_absent(tree: Sysfs) -> None:
    assert tree.listdir("/sys/class/powercap") == ["intel-rapl:0"]
    assert tree.listdir("/sys/class/hwmon") == []


def test_a_link_out_of_the_tree_is_refused_never_followed(tmp_path: Path) -> None:
    # A planted link made the agent write 82500000 into a file outside HOST_ROOT.
    root, outside = tmp_path / "host", tmp_path / "elsewhere"
    outside.mkdir()
    victim = outside / "important"
    victim.write_text("keep\n")
    link = root / LIMIT.lstrip("/")
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    tree = Sysfs(root)
    with pytest.raises(SysfsError) as refused:
        tree.write(LIMIT, "82500000")
    assert refused.value.kind is ErrorKind.PERMISSION
    assert "outside" in refused.value.detail
    assert victim.read_text() == "keep\n"
    # A directory link that stays inside the tree, as sysfs's own are, still works.
    real = root / "sys/devices/virtual/powercap/intel-rapl/intel-rapl:1"
    real.mkdir(parents=True)
    (real / "constraint_0_power_limit_uw").write_text("1\n")
    (root / "sys/class/powercap/intel-rapl:1").symlink_to(real)
    tree.write("/sys/class/powercap/intel-rapl:1/constraint_0_power_limit_uw", "2")
    assert (real / "constraint_0_power_limit_uw").read_text() == "2"
