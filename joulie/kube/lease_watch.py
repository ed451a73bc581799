"""One named Lease, kept current by a watch: how a reader tells whether the Lease's holder is
alive without a request of its own (the extender and `joulie status` read the manager's)."""

from __future__ import annotations

from joulie.kube.client import KubeClient
from joulie.kube.informer import Informer
from joulie.kube.projections import LeaseView, lease_view


class LeaseWatch:
    """An informer field-selected to one Lease by name (so it lists and watches only that one,
    and RBAC may grant it by resourceNames)."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self._key = f"{namespace}/{name}"
        self.informer: Informer[LeaseView] = Informer(
            client,
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            lease_view,
            field_selector=f"metadata.name={name}",
        )

    def view(self) -> LeaseView | None:
        """The Lease's renewal time and duration as last seen; None while there is none."""
        return self.informer.get(self._key)
