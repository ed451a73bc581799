"""A DaemonSet agent that cannot reach the API server, as a real process on a fake node: a
previous agent of the same boot left a cap in force and its baseline on disk; the new agent,
unable to read any spec for SPEC_READ_TIMEOUT, puts the node's own value back, and SIGTERM then
ends it cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from hack.cluster.runner import free_port
from joulie.agent.baseline import BOOT_ID_PATH, Baseline
from tests.support.sysfs_trees import intel_xeon_8260
from tests.support.waiting import wait_until

JOULIE = str(Path(sys.executable).parent / "joulie")
LIMIT0 = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"


def test_an_agent_without_the_api_server_restores_what_a_previous_agent_left(
    tmp_path: Path,
) -> None:
    tree = intel_xeon_8260(tmp_path / "root")
    tree.put(BOOT_ID_PATH, "0b0b0b0b-1111-2222-3333-444444444444")
    original = tree.read(LIMIT0)
    state = tmp_path / "state"
    Baseline.load(state, tree).record(LIMIT0, original)
    tree.put(LIMIT0, 90_000_000)  # the previous agent's cap, still in force
    nowhere = tmp_path / "kubeconfig"
    nowhere.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "gone",
                        "cluster": {
                            "server": f"https://127.0.0.1:{free_port()}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "agent", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "gone", "user": "agent"}}],
                "current-context": "c",
            }
        )
    )
    env = {
        **os.environ,
        "KUBECONFIG": str(nowhere),
        "NODE_NAME": "n1",
        "HOST_ROOT": str(tree.root),
        "STATE_DIR": str(state),
        "SPEC_READ_TIMEOUT": "5s",
        "METRICS_ADDR": f"127.0.0.1:{free_port()}",
        "LOG_FORMAT": "json",
    }
    log = tmp_path / "agent.log"
    with log.open("w") as out:
        agent = subprocess.Popen(
            [JOULIE, "--role=agent"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: tree.read(LIMIT0) == original, 30, "the node's own cap back")
        assert agent.poll() is None, log.read_text()[-3000:]
    finally:
        agent.terminate()
        code = agent.wait(30)
    assert code == 0, log.read_text()[-3000:]
    assert tree.read(LIMIT0) == original
    assert not (state / "baseline.json").exists()
    assert "restoring the node's own settings" in log.read_text()
