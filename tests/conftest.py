from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.cluster.runner import LocalCluster, binaries_built
from tests.support.power_receiver import receiver  # noqa: F401 - a fixture for every tier

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def repo_root() -> Path:
    return ROOT


# --- the local control plane (tests/kube, tests/e2e) -----------------------------------------


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One real control plane for the whole run, shared by every kube and e2e test.

    Missing binaries fail the run in CI (where `make test` builds them first) and skip locally
    with the command that builds them.
    """
    if not binaries_built():
        message = "control-plane binaries are missing: run hack/build-binaries.sh (or make test)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    local = LocalCluster(work_dir=tmp_path_factory.mktemp("cluster"), log=_progress)
    local.up()
    try:
        yield local
    finally:
        local.down()


def _progress(line: str) -> None:
    print(f"[cluster] {line}", file=sys.stderr)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": name}}).raise_for_status()
    yield name
    with cluster.api() as api:
        api.delete(f"/api/v1/namespaces/{name}")
