"""Each role's credentials can do exactly what its ClusterRole (and Role) in manifests/ grant."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hack.cluster.runner import NAMESPACE, LocalCluster
from tests.support.tokens import role_client

pytestmark = pytest.mark.kube

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
# (API group, resource, subresource, namespace) probed for every role.
TARGETS = (
    ("", "nodes", "", ""),
    ("", "pods", "", "default"),
    ("", "pods", "eviction", "default"),
    ("", "secrets", "", NAMESPACE),
    ("joulie.io", "nodetwins", "", ""),
    ("joulie.io", "nodetwins", "status", ""),
    ("joulie.io", "nodehardwares", "", ""),
    ("joulie.io", "nodehardwares", "status", ""),
    ("events.k8s.io", "events", "", "default"),
    ("events.k8s.io", "events", "", "kube-system"),
    ("coordination.k8s.io", "leases", "", NAMESPACE),
    ("coordination.k8s.io", "leases", "", "kube-system"),
)


def granted(role: str) -> set[tuple[str, str, str, str, str]]:
    """(verb, group, resource, subresource, namespace) triples the manifests grant ``role``."""
    docs = [d for d in yaml.safe_load_all((RBAC / f"{role}.yaml").read_text()) if d]
    allowed = set()
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = doc["metadata"].get("namespace")
        for rule, (verb, target) in itertools.product(
            doc["rules"], itertools.product(VERBS, TARGETS)
        ):
            group, resource, sub, ns = target
            name = f"{resource}/{sub}" if sub else resource
            if (
                group in rule["apiGroups"]
                and name in rule["resources"]
                and verb in rule["verbs"]
                and (scope is None or scope == ns)
                # A rule for named objects grants nothing on the unnamed probes.
                and not rule.get("resourceNames")
            ):
                allowed.add((verb, *target))
    return allowed


def can(
    client: httpx.Client,
    verb: str,
    group: str,
    resource: str,
    sub: str,
    ns: str,
    name: str = "",
) -> bool:
    attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
    if name:
        attributes["name"] = name
    if sub:
        attributes["subresource"] = sub
    if ns:
        attributes["namespace"] = ns
    response = client.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        json={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    response.raise_for_status()
    return bool(response.json()["status"]["allowed"])


@pytest.mark.parametrize("role", ["manager", "agent", "extender", "simulator"])
def test_access_matrix_matches_the_manifests(cluster: LocalCluster, role: str) -> None:
    expected = granted(role)
    assert expected, f"no rules parsed for {role}"
    with role_client(cluster, role) as client:
        actual = {
            (verb, *target)
            for verb, target in itertools.product(VERBS, TARGETS)
            if can(client, verb, *target)
        }
    assert actual == expected


def test_what_matters_most(cluster: LocalCluster) -> None:
    with role_client(cluster, "extender") as extender:
        assert not can(extender, "patch", "", "nodes", "", "")
        assert can(extender, "list", "joulie.io", "nodetwins", "", "")
        # The manager's Lease, and no other: its watch is field-selected by that name.
        lease = ("coordination.k8s.io", "leases", "", NAMESPACE)
        for verb in ("get", "list", "watch"):
            assert can(extender, verb, *lease, name="joulie-manager")
        assert not can(extender, "get", *lease, name="kube-scheduler")
        assert not can(extender, "update", *lease, name="joulie-manager")
    with role_client(cluster, "agent") as agent:
        # It could forge a Warning Event about any node, in kube-system as anywhere.
        assert not can(agent, "create", "events.k8s.io", "events", "", "kube-system")
        assert not can(agent, "create", "events.k8s.io", "events", "", "default")
        assert not can(agent, "patch", "joulie.io", "nodetwins", "", "")
        assert can(agent, "patch", "joulie.io", "nodetwins", "status", "")
        assert not can(agent, "patch", "", "nodes", "", "")
    with role_client(cluster, "manager") as manager:
        assert can(manager, "patch", "", "nodes", "", "")
        assert not can(manager, "get", "", "secrets", "", NAMESPACE)
        assert can(manager, "create", "events.k8s.io", "events", "", "default")
        assert not can(manager, "create", "events.k8s.io", "events", "", "kube-system")
        assert can(manager, "update", "coordination.k8s.io", "leases", "", NAMESPACE)
        assert not can(manager, "update", "coordination.k8s.io", "leases", "", "kube-system")


def test_role_credentials_really_are_refused(cluster: LocalCluster) -> None:
    """Not only the review: an actual write with the extender's token is forbidden."""
    with role_client(cluster, "extender") as extender:
        response = extender.patch(
            "/api/v1/nodes/any-node",
            json={"metadata": {"labels": {"x": "y"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert response.status_code == 403
