"""`joulie plan`: what the policy would do, without writing anything.

From a cluster inventory file it prints the per-family split of performance nodes and each
node's profile, through the same `joulie.core.policies` functions the controller manager runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from joulie.api import keys
from joulie.api.inventory import Inventory, NodeGroup
from joulie.api.text_table import aligned
from joulie.core.policies import ClassCaps, Plan, PlanNode, family_split, plan
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import optimal_gpu_cap_w
from joulie.hardware.recognition import HardwareView, hardware_view
from joulie.hardware.unknown_models import Kind, unknown_models, unknown_parts
from joulie.manager.config import policy_inputs
from joulie.manager.settings import ManagerSettings


def inventory_views(
    inventory: Inventory,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> list[HardwareView]:
    """The hardware of each node group of the inventory, as the manager recognises it."""
    return list(_group_views(inventory, catalog, gpu_product_label_keys).values())


def inventory_nodes(
    inventory: Inventory,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> list[PlanNode]:
    """Plan nodes of an inventory, no current labels. Each group's family is recognised from
    the labels and annotations its nodes carry in a KWOK cluster, exactly as the controller
    manager recognises a node that has no NodeHardware yet."""
    views = _group_views(inventory, catalog, gpu_product_label_keys)
    return [
        PlanNode(name=name, family=views[group].family, current_profile=None)
        for name, group in inventory.nodes_by_name()
    ]


def unrecognised_models(
    inventory: Inventory,
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> list[str]:
    """One line per CPU or GPU model of the inventory that the catalog does not know (a GPU
    count with no model named is one too), each model once with its node count: such a model
    still forms a family, but is planned without the catalog's power figures, which a typo in
    the inventory would otherwise hide."""
    views = _group_views(inventory, catalog, gpu_product_label_keys)
    seen: list[tuple[Kind, str | None, int]] = [
        (kind, group.cpu if kind == "CPU" else group.product, group.replicas)
        for group in inventory.nodes
        for kind, _ in unknown_parts(views[group], catalog)
    ]
    return [model.describe("planned") for model in unknown_models(seen)]


def _group_views(
    inventory: Inventory, catalog: Catalog, gpu_product_label_keys: Iterable[str]
) -> dict[NodeGroup, HardwareView]:
    """Each node group's hardware, recognised once per group (its nodes are alike)."""
    product_keys = tuple(gpu_product_label_keys)
    views: dict[NodeGroup, HardwareView] = {}
    for _, group in inventory.nodes_by_name():
        if group not in views:
            views[group] = hardware_view(
                None,
                group.hardware_labels(),
                group.hardware_annotations(),
                group.capacity(),
                catalog,
                product_keys,
            )
    return views


def family_gpu_caps(views: Iterable[HardwareView], catalog: Catalog) -> dict[str, float | None]:
    """Each GPU family's energy-optimal board cap (what ``class_caps`` gives standard work and
    idle boards); None for a GPU the catalog does not know, which keeps the node-level cap."""
    return {v.family: optimal_gpu_cap_w(v, catalog) for v in views if v.gpu_count > 0}


def make_plan(nodes: Sequence[PlanNode], settings: ManagerSettings, perf_pods: int) -> Plan:
    """The plan the controller manager would make with these settings, now."""
    return plan(nodes, policy_inputs(settings), perf_pods, time.time())


def render(
    nodes: Sequence[PlanNode],
    result: Plan,
    output: str,
    gpu_caps: Mapping[str, float | None] | None = None,
    policy: str | None = None,
) -> str:
    """The plan as a table or JSON; ``gpu_caps`` (:func:`family_gpu_caps`) are shown when the
    policy caps each GPU by the class of its pod. ``policy``: the registry name the user sets
    (POLICY_TYPE, ``--policy``), shown with the versioned name the NodeTwins record.

    JSON keys are snake_case, as in every JSON the CLI prints (``status``, ``simulate``,
    ``config``): those are the larger part and are read by Python tools; only the Kubernetes
    objects themselves are camelCase, as the API requires."""
    performance = frozenset(n for n, p in result.profiles.items() if p == "performance")
    split = family_split(nodes, performance)
    caps = result.class_caps
    registry_name = policy or result.policy_name
    if output == "json":
        data: dict[str, Any] = {
            "policy": registry_name,
            "policy_version": result.policy_name,
            "hp_count": result.hp_count,
            "performance_count": result.performance_count,
            "node_count": len(nodes),
            "families": {
                family: {"nodes": total, "performance": perf}
                for family, (total, perf) in sorted(split.items())
            },
            "nodes": dict(sorted(result.profiles.items())),
        }
        if caps is not None:
            data["class_caps"] = {
                "performance_pct_of_max": caps.performance_pct_of_max,
                "standard_and_idle_watts_per_gpu": dict(sorted((gpu_caps or {}).items())),
                "standard_exclusive_cores_at_nominal": caps.cpu_standard_at_nominal,
                "cpu_eco_when_standard": caps.cpu_eco_when_standard,
            }
        return json.dumps(data, indent=2)
    version = f" ({result.policy_name})" if result.policy_name != registry_name else ""
    families = [
        [family, str(total), str(perf), str(total - perf)]
        for family, (total, perf) in sorted(split.items())
    ]
    lines = [
        f"policy {registry_name}{version}: {result.performance_count} of {len(nodes)} nodes in "
        f"performance (requested {result.hp_count})",
        "",
        *aligned([["family", "nodes", "performance", "eco"], *families], labels=1),
    ]
    if caps is not None:
        lines += ["", *_class_caps_lines(caps, gpu_caps or {})]
    return "\n".join(lines)


def _class_caps_lines(caps: ClassCaps, gpu_caps: Mapping[str, float | None]) -> list[str]:
    performance = (
        "uncapped"
        if caps.performance_pct_of_max >= 100
        else f"{caps.performance_pct_of_max:g} % of max"
    )
    lines = [
        f"GPUs capped by the class of the pod on each board: performance work {performance}; "
        "standard work and idle boards at"
    ]
    if not gpu_caps:
        return [*lines, "  no GPU nodes", *_cpu_class_lines(caps)]
    width = max(len(f) for f in gpu_caps)
    for family, watts in sorted(gpu_caps.items()):
        shown = (
            f"{watts:g} W (the board's energy-optimal cap)"
            if watts is not None
            else "the node-level cap (model not in the catalog)"
        )
        lines.append(f"  {family:<{width}}  {shown}")
    return [*lines, *_cpu_class_lines(caps)]


def _cpu_class_lines(caps: ClassCaps) -> list[str]:
    cores = (
        "at their nominal frequency"
        if caps.cpu_standard_at_nominal
        else "as the node-level preset says"
    )
    node = (
        "eco caps while every pod on the node is standard"
        if caps.cpu_eco_when_standard
        else "performance caps"
    )
    return [
        f"CPUs: cores a standard pod holds exclusively {cores}; the rest of each node at its {node}"
    ]


async def live(
    settings: ManagerSettings, output: str, timeout: float = 15.0, kubeconfig: str | None = None
) -> str:
    """Plan the live cluster from one sync of the manager's own caches; write nothing.

    Raises ``ClusterError`` when the cluster is not configured, does not answer within
    ``timeout`` seconds, or refuses a list (rather than retrying as the manager would)."""
    import asyncio

    from joulie.kube.connection import connect, wait_synced
    from joulie.manager.role import ManagerRole

    stopping = asyncio.Event()
    async with await connect(kubeconfig, timeout=timeout) as client:
        role = ManagerRole(settings, client)
        try:
            tasks = await wait_synced(
                role.observe(client, stopping),
                lambda: role.informers,
                client.source,
                client.host,
                timeout,
            )
            planned = role.planned()
        finally:
            stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    changes = {
        node.name: (node.current_profile, planned.result.profiles[node.name])
        for node in planned.plan_nodes
        if node.current_profile != planned.result.profiles[node.name]
    }
    gpu_caps = family_gpu_caps(planned.views.values(), Catalog.load())
    text = render(planned.plan_nodes, planned.result, output, gpu_caps, settings.policy_type.value)
    if output == "json":
        data = json.loads(text)
        data["performance_pods"] = planned.perf_pods
        data["changes"] = {n: {"from": old, "to": new} for n, (old, new) in sorted(changes.items())}
        return json.dumps(data, indent=2)
    lines = [text, "", f"performance pods (running + pending): {planned.perf_pods}"]
    if changes:
        lines.append(f"{len(changes)} nodes would change profile:")
        lines += [f"  {n}: {old or '(none)'} -> {new}" for n, (old, new) in sorted(changes.items())]
    else:
        lines.append("no node would change profile")
    return "\n".join(lines)


def load_catalog(path: str | None) -> Catalog:
    return Catalog.load(Path(path) if path else None)
