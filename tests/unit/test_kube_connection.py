"""A cluster that cannot be used is one line saying which configuration and what is wrong.

The kubeconfigs are real files and the servers real sockets: a port nobody listens on, and one
that accepts connections but never answers (a stopped API server looks like that)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import free_port
from joulie.kube.connection import ClusterConnector, ClusterError, connect, kubeconfig_paths


def kubeconfig(
    server: str = "https://127.0.0.1:6443", current: str | None = "dev", **extra: Any
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server}}],
        "contexts": [{"name": "dev", "context": {"cluster": "local", "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        **extra,
    }
    if current is not None:
        document["current-context"] = current
    return document


def write(path: Path, document: Any) -> str:
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return str(path)


def problem(kubeconfig_path: str) -> ClusterError:
    with pytest.raises(ClusterError) as caught:
        asyncio.run(connect(kubeconfig_path, timeout=5))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"kubeconfig {kubeconfig_path}: ")
    return caught.value


def test_missing_file(tmp_path: Path) -> None:
    error = problem(str(tmp_path / "nowhere"))
    assert error.problem == "file not found"
    assert error.config


def test_a_directory_is_not_a_kubeconfig(tmp_path: Path) -> None:
    assert problem(str(tmp_path)).problem == "is a directory, not a file"


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    error = problem(write(tmp_path / "config", "apiVersion: v1\nclusters: [oops\n"))
    assert error.problem.startswith("not valid YAML at line 3: ")
    assert error.config


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    error = problem(write(tmp_path / "config", "- just\n- a list\n"))
    assert error.problem == "not a kubeconfig (expected a YAML mapping)"


def test_no_current_context_lists_the_contexts(tmp_path: Path) -> None:
    error = problem(write(tmp_path / "config", kubeconfig(current=None)))
    assert error.problem == "no current-context is set (it defines 'dev')"


def test_empty_file(tmp_path: Path) -> None:
    error = problem(write(tmp_path / "config", ""))
    assert error.problem == "no current-context is set and defines no context"


def test_unknown_context(tmp_path: Path) -> None:
    error = problem(write(tmp_path / "config", kubeconfig(current="prod")))
    assert error.problem == "current-context 'prod' is not defined; it defines 'dev'"


def test_context_naming_an_unknown_cluster(tmp_path: Path) -> None:
    document = kubeconfig()
    document["contexts"][0]["context"]["cluster"] = "elsewhere"
    error = problem(write(tmp_path / "config", document))
    assert error.problem == "context 'dev' names cluster 'elsewhere', which is not defined"


def test_a_list_of_files_is_merged_and_missing_ones_are_skipped(tmp_path: Path) -> None:
    # kubectl's rule: the first file that sets current-context wins; absent files are ignored.
    first = write(tmp_path / "a", {"current-context": "dev"})
    server = f"https://127.0.0.1:{free_port()}"
    second = write(tmp_path / "b", kubeconfig(server, current=None))
    error = problem(f"{first}:{tmp_path / 'absent'}:{second}")
    assert error.problem == f"cannot reach the API server at {server}: connection refused"
    assert not error.config  # the configuration is fine; the server is not there
    with pytest.raises(ClusterError, match="none of these files exists"):
        asyncio.run(connect(f"{tmp_path / 'x'}:{tmp_path / 'y'}", timeout=5))


def test_where_the_configuration_comes_from() -> None:
    home = str(Path("~/.kube/config").expanduser())
    assert kubeconfig_paths("/a:/b", {"KUBECONFIG": "/c"}) == ["/a", "/b"]
    assert kubeconfig_paths(None, {"KUBECONFIG": "/c", "KUBERNETES_SERVICE_HOST": "h"}) == ["/c"]
    assert kubeconfig_paths(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    assert kubeconfig_paths(None, {}) == [home]


def test_in_cluster_without_a_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    with pytest.raises(ClusterError) as caught:
        asyncio.run(connect(timeout=5))
    assert str(caught.value).startswith("in-cluster config: the service account token file")
    assert caught.value.config


def test_closed_port_is_connection_refused_with_the_url(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    error = problem(write(tmp_path / "config", kubeconfig(server)))
    assert error.problem == f"cannot reach the API server at {server}: connection refused"
    assert not error.config


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_does_not_answer_is_a_timeout(tmp_path: Path, silent_server: str) -> None:
    path = write(tmp_path / "config", kubeconfig(silent_server))
    with pytest.raises(ClusterError) as caught:
        asyncio.run(connect(path, timeout=0.5))
    assert caught.value.problem == (
        f"the API server at {silent_server} did not answer within 0.5 s"
    )


@pytest.mark.asyncio
async def test_connector_retries_and_says_why_until_stopped(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    path = write(tmp_path / "config", kubeconfig(server))
    connector = ClusterConnector(path, timeout=1)
    stopping = asyncio.Event()
    attempt = asyncio.create_task(connector.connect(stopping))
    while connector.problem is None:  # until the first attempt has failed
        assert not attempt.done()
        await asyncio.wait([attempt], timeout=0.01)
    assert connector.status() == (
        f"not connected: kubeconfig {path}: cannot reach the API server at {server}: "
        "connection refused"
    )
    stopping.set()
    assert await asyncio.wait_for(attempt, 5) is None
