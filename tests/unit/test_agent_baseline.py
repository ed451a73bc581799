"""The settings as they were before the agent's first write: recorded once, kept on disk with the
boot id, reused after a restart in the same boot, discarded after a reboot, written back on
restore."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from joulie.agent.baseline import (
    BOOT_ID_PATH,
    STATE_FILE,
    Baseline,
    BaselineError,
    RestoreWriter,
)
from tests.support.fake_sysfs import FakeSysfs

LIMIT = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
GOVERNOR = "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
GPU_LIMIT = "nvml:GPU-1234:power_limit_mw"


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfs:
    tree = FakeSysfs(tmp_path / "root")
    tree.put(BOOT_ID_PATH, "11111111-aaaa-bbbb-cccc-000000000001")
    tree.put(LIMIT, 165_000_000)
    tree.put(GOVERNOR, "powersave")
    return tree


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def sysfs_writer(tree: FakeSysfs) -> RestoreWriter:
    def write(key: str, value: str | int) -> None:
        tree.write(key, str(value))

    return write


def test_first_value_is_kept_and_the_agents_own_value_never_replaces_it(
    tree: FakeSysfs, state: Path
) -> None:
    baseline = Baseline.load(state, tree)
    assert baseline.record(LIMIT, tree.read(LIMIT)) is True
    tree.write(LIMIT, "100000000")  # the agent's write
    assert baseline.record(LIMIT, tree.read(LIMIT)) is False
    assert baseline.get(LIMIT) == "165000000"


def test_gpu_settings_share_the_record_under_their_own_keys(tree: FakeSysfs, state: Path) -> None:
    baseline = Baseline.load(state, tree)
    baseline.record(GPU_LIMIT, 700_000)
    gpu = {GPU_LIMIT: 400_000}

    def nvml_writer(key: str, value: str | int) -> None:
        gpu[key] = int(value)

    assert baseline.restore([GPU_LIMIT], nvml_writer) == {GPU_LIMIT: None}
    assert gpu[GPU_LIMIT] == 700_000
    assert GPU_LIMIT not in baseline


def test_a_restart_in_the_same_boot_reuses_the_stored_baseline(
    tree: FakeSysfs, state: Path
) -> None:
    first = Baseline.load(state, tree)
    first.record(LIMIT, tree.read(LIMIT))
    first.record(GOVERNOR, tree.read(GOVERNOR))
    tree.write(LIMIT, "100000000")
    tree.write(GOVERNOR, "performance")

    # The process restarts: the files now hold the agent's values.
    second = Baseline.load(state, tree)
    assert second.note is None
    assert second.entries() == {LIMIT: "165000000", GOVERNOR: "powersave"}
    assert second.record(LIMIT, tree.read(LIMIT)) is False
    second.restore_all(sysfs_writer(tree))
    assert tree.read(LIMIT) == "165000000"
    assert tree.read(GOVERNOR) == "powersave"
    assert len(second) == 0
    assert not (state / STATE_FILE).exists()


def test_a_baseline_from_another_boot_is_discarded(tree: FakeSysfs, state: Path) -> None:
    before = Baseline.load(state, tree)
    before.record(LIMIT, "165000000")
    tree.put(BOOT_ID_PATH, "22222222-aaaa-bbbb-cccc-000000000002")  # the node rebooted

    after = Baseline.load(state, tree)
    assert len(after) == 0
    assert after.note is not None
    assert "rebooted" in after.note
    assert after.record(LIMIT, "150000000") is True
    stored = json.loads((state / STATE_FILE).read_text())
    assert stored["bootId"] == "22222222-aaaa-bbbb-cccc-000000000002"
    assert stored["settings"] == {LIMIT: "150000000"}


@pytest.mark.parametrize(
    "contents",
    [
        "{not json",
        "[]",
        '{"format": 1, "bootId": "11111111-aaaa-bbbb-cccc-000000000001", "settings": {"k": [1]}}',
        '{"format": 99, "bootId": "x", "settings": {}}',
        "",
        # Nested past the interpreter's stack: it crashed the agent with RecursionError.
        pytest.param("[" * 100_000 + "]" * 100_000, id="nested-100000-deep"),
    ],
)
def test_a_corrupt_state_file_is_set_aside_with_a_message(
    tree: FakeSysfs, state: Path, contents: str
) -> None:
    state.mkdir()
    (state / STATE_FILE).write_text(contents)
    baseline = Baseline.load(state, tree)
    assert len(baseline) == 0
    assert baseline.note is not None
    assert "empty baseline" in baseline.note
    assert STATE_FILE in baseline.note
    assert (state / (STATE_FILE + ".corrupt")).read_text() == contents
    # The settings may hold an earlier agent's values, which would be recorded as the node's
    # own: nothing is written until an operator has looked (and restarted the agent).
    with pytest.raises(BaselineError, match="check the node's power settings"):
        baseline.record(LIMIT, "165000000")
    restarted = Baseline.load(state, tree)
    assert restarted.refusal is None
    assert restarted.record(LIMIT, "165000000") is True


def test_without_a_boot_id_nothing_is_recorded_and_a_stored_baseline_is_kept(
    tree: FakeSysfs, state: Path
) -> None:
    Baseline.load(state, tree).record(LIMIT, "165000000")
    tree.put(BOOT_ID_PATH, "")  # /proc not mounted where the agent looks
    blind = Baseline.load(state, tree)
    assert blind.get(LIMIT) == "165000000"  # still restorable
    with pytest.raises(BaselineError, match="boot id"):
        blind.record(GOVERNOR, "powersave")


def test_one_agent_at_a_time_holds_a_nodes_baseline(tree: FakeSysfs, state: Path) -> None:
    first = Baseline.load(state, tree)
    first.hold(0)
    assert first.refusal is None
    second = Baseline.load(state, tree)
    second.hold(0.3)
    with pytest.raises(BaselineError, match="another agent holds"):
        second.record(LIMIT, "165000000")


def test_the_state_file_is_replaced_whole_never_written_in_place(
    tree: FakeSysfs, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = Baseline.load(state, tree)
    baseline.record(LIMIT, "165000000")
    good = (state / STATE_FILE).read_text()

    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        replaced.append((str(src), str(dst)))
        # At the moment of the rename the new contents are complete in the temporary file.
        assert json.loads(Path(src).read_text())["settings"][GOVERNOR] == "powersave"
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    baseline.record(GOVERNOR, "powersave")
    assert len(replaced) == 1
    assert replaced[0][1] == str(state / STATE_FILE)
    assert replaced[0][0] != replaced[0][1]

    # A crash before the rename (here: fsync fails) leaves the previous file as it was and no
    # temporary file behind; the entry is not kept, and the caller must not write.
    monkeypatch.setattr(os, "replace", real_replace)
    before_failure = (state / STATE_FILE).read_text()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(BaselineError, match="No space left"):
        baseline.record("/sys/devices/system/cpu/intel_pstate/no_turbo", "0")
    assert (state / STATE_FILE).read_text() == before_failure
    assert json.loads(before_failure)["settings"] == {LIMIT: "165000000", GOVERNOR: "powersave"}
    assert sorted(p.name for p in state.iterdir() if p.suffix == ".tmp") == []
    assert "/sys/devices/system/cpu/intel_pstate/no_turbo" not in baseline
    assert good != before_failure


def test_a_failed_restore_keeps_the_entry_and_the_others_go_on(
    tree: FakeSysfs, state: Path
) -> None:
    baseline = Baseline.load(state, tree)
    baseline.record(LIMIT, "165000000")
    baseline.record(GOVERNOR, "powersave")
    tree.write(LIMIT, "100000000")
    tree.write(GOVERNOR, "performance")
    tree.refuse(LIMIT)

    outcome = baseline.restore_all(sysfs_writer(tree))
    assert outcome[GOVERNOR] is None
    assert outcome[LIMIT] is not None
    assert list(outcome) == [GOVERNOR, LIMIT]  # the last recorded first
    assert tree.read(GOVERNOR) == "powersave"
    assert baseline.entries() == {LIMIT: "165000000"}
    assert Baseline.load(state, tree).entries() == {LIMIT: "165000000"}


def test_restoring_a_setting_never_recorded_writes_nothing(tree: FakeSysfs, state: Path) -> None:
    baseline = Baseline.load(state, tree)
    assert baseline.restore([LIMIT], sysfs_writer(tree)) == {}
    assert tree.writes == []


def test_values_must_be_text_or_integers(tree: FakeSysfs, state: Path) -> None:
    baseline = Baseline.load(state, tree)
    with pytest.raises(BaselineError):
        baseline.record(LIMIT, True)
    with pytest.raises(BaselineError):
        baseline.record(LIMIT, 1.5)  # type: ignore[arg-type]
    assert len(baseline) == 0
