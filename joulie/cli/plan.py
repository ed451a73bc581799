"""`joulie plan`: what the policy would do, without writing anything.

From a cluster inventory file it prints the per-family split of performance nodes and each
node's profile, through the same `joulie.core.policies` functions the controller manager runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from joulie.api import keys
from joulie.api.inventory import Inventory, NodeGroup
from joulie.core.policies import Plan, PlanNode, family_split, plan
from joulie.hardware.catalog import Catalog
from joulie.hardware.recognition import HardwareView, hardware_view
from joulie.hardware.unknown_models import Kind, unknown_models, unknown_parts
from joulie.manager.config import policy_inputs
from joulie.manager.settings import ManagerSettings


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


def make_plan(nodes: Sequence[PlanNode], settings: ManagerSettings, perf_pods: int) -> Plan:
    """The plan the controller manager would make with these settings, now."""
    return plan(nodes, policy_inputs(settings), perf_pods, time.time())


def render(nodes: Sequence[PlanNode], result: Plan, output: str) -> str:
    performance = frozenset(n for n, p in result.profiles.items() if p == "performance")
    split = family_split(nodes, performance)
    if output == "json":
        return json.dumps(
            {
                "policy": result.policy_name,
                "hpCount": result.hp_count,
                "performanceCount": result.performance_count,
                "nodeCount": len(nodes),
                "families": {
                    family: {"nodes": total, "performance": perf}
                    for family, (total, perf) in sorted(split.items())
                },
                "nodes": dict(sorted(result.profiles.items())),
            },
            indent=2,
        )
    width = max([len("FAMILY"), *(len(f) for f in split)])
    lines = [
        f"policy {result.policy_name}: {result.performance_count} of {len(nodes)} nodes in "
        f"performance (requested {result.hp_count})",
        "",
        f"{'FAMILY':<{width}}  {'NODES':>6}  {'PERFORMANCE':>11}  {'ECO':>6}",
    ]
    for family, (total, perf) in sorted(split.items()):
        lines.append(f"{family:<{width}}  {total:>6}  {perf:>11}  {total - perf:>6}")
    return "\n".join(lines)


async def live(settings: ManagerSettings, output: str, timeout: float = 15.0) -> str:
    """Plan the live cluster from one sync of the manager's own caches; write nothing.

    Raises ``ClusterError`` when the cluster is not configured, does not answer within
    ``timeout`` seconds, or refuses a list (rather than retrying as the manager would)."""
    import asyncio

    from joulie.kube.connection import connect, wait_synced
    from joulie.manager.role import ManagerRole

    stopping = asyncio.Event()
    async with await connect(timeout=timeout) as client:
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
    text = render(planned.plan_nodes, planned.result, output)
    if output == "json":
        data = json.loads(text)
        data["performancePods"] = planned.perf_pods
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
