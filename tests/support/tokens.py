"""Credentials of Joulie's ServiceAccounts for tests against the local API server: a client
holding a role's token, and a token as a DaemonSet agent's pod holds it (bound to a pod on a
given node, which the API server stamps with the node's name: what the confinement policy
reads)."""

from __future__ import annotations

import httpx
import yaml

from hack.cluster.runner import NAMESPACE, LocalCluster


def token_client(cluster: LocalCluster, token: str) -> httpx.Client:
    """An API client sending ``token`` (close it, or use it in a ``with``)."""
    return httpx.Client(
        base_url=cluster.server,
        verify=cluster.ca_tls(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def role_client(cluster: LocalCluster, role: str) -> httpx.Client:
    """An API client holding the token of ServiceAccount ``joulie-<role>``."""
    config = yaml.safe_load(cluster.role_kubeconfig(role).read_text())
    return token_client(cluster, config["users"][0]["user"]["token"])


def pod_bound_token(
    api: httpx.Client, pod: str, node: str, *, account: str = "joulie-agent", ttl_s: int = 3600
) -> str:
    """Create pod ``pod`` on ``node`` running as ``account`` and return a token bound to it
    (delete the pod to revoke it)."""
    created = api.post(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        json={
            "metadata": {"name": pod},
            "spec": {
                "nodeName": node,
                "serviceAccountName": account,
                "containers": [{"name": "agent", "image": "example.com/joulie:1"}],
            },
        },
    )
    created.raise_for_status()
    answer = api.post(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": ttl_s,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod,
                    "uid": created.json()["metadata"]["uid"],
                },
            },
        },
    )
    answer.raise_for_status()
    return str(answer.json()["status"]["token"])
