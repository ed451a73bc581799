"""`joulie plan --live` against a real API server that will not serve it: bad credentials, a
certificate it cannot verify, a ServiceAccount without the permissions. Each ends at once (no
retrying for ever) with exit status 1 and one line saying which kubeconfig and what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import LocalCluster

pytestmark = pytest.mark.kube

JOULIE = str(Path(sys.executable).parent / "joulie")
BOUND_S = 15.0


def plan_live(kubeconfig: Path) -> tuple[str, float]:
    """The one line ``joulie plan --live`` printed before exiting 1, and how long it took."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    started = time.monotonic()
    result = subprocess.run(
        [JOULIE, "plan", "--live"],
        env={**env, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0], took


def altered(
    cluster: LocalCluster, tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> Path:
    document = yaml.safe_load(cluster.role_kubeconfig("manager").read_text())
    change(document)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


def test_rejected_token_is_401(cluster: LocalCluster, tmp_path: Path) -> None:
    def bad_token(document: dict[str, Any]) -> None:
        document["users"][0]["user"] = {"token": "not-a-token"}

    path = altered(cluster, tmp_path, bad_token)
    line, took = plan_live(path)
    assert line == (
        f"joulie: kubeconfig {path}: the API server at {cluster.server} rejected the "
        "credentials (401 Unauthorized)"
    )
    assert took < BOUND_S


def test_unverifiable_certificate_is_a_tls_error(cluster: LocalCluster, tmp_path: Path) -> None:
    def no_ca(document: dict[str, Any]) -> None:
        del document["clusters"][0]["cluster"]["certificate-authority"]

    path = altered(cluster, tmp_path, no_ca)
    line, took = plan_live(path)
    assert line.startswith(f"joulie: kubeconfig {path}: TLS error talking to {cluster.server}: ")
    assert "certificate" in line
    assert took < BOUND_S


def test_missing_permission_is_403_naming_the_resource(cluster: LocalCluster) -> None:
    # The simulator's ServiceAccount may list nodes and pods but neither NodeHardware nor
    # NodeTwins, which the plan needs (every agent role now lists pods: class_caps reads their
    # class). The informers list at once, so either refusal may be the first seen and reported;
    # whichever it is, the line names it as the API server did.
    line, took = plan_live(cluster.role_kubeconfig("simulator"))
    prefix = f"joulie: kubeconfig {cluster.role_kubeconfig('simulator')}: cannot list "
    assert line.startswith(prefix)
    resource = line[len(prefix) :].split(":", 1)[0]
    assert resource in ("nodehardwares", "nodetwins"), line
    assert line.startswith(
        f"{prefix}{resource}: the API server at {cluster.server} denied access (403 Forbidden): "
    )
    assert f'cannot list resource "{resource}" in API group "joulie.io"' in line
    assert "system:serviceaccount:joulie-system:joulie-simulator" in line
    assert took < BOUND_S
