"""kube-scheduler's preemption call to the extender (ExtenderPreemptionArgs in,
ExtenderPreemptionResult out), read and written.

ExtenderPreemptionArgs carries, per candidate node, the pods kube-scheduler would evict there:
as UIDs ("NodeNameToMetaVictims", nodeCacheCapable) or as whole Pods ("NodeNameToVictims"). The
answer always names them by UID; kube-scheduler maps each UID back to a pod on that same node, so
an answer must only keep or drop what it was sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from joulie.core.preemption_candidates import Candidate
from joulie.extender.go_json import (
    ABSENT,
    WireError,
    as_object,
    decode,
    dump_fast,
    go_field,
    type_name,
)
from joulie.extender.wire import MAX_NODES

MAX_VICTIMS_PER_NODE: Final = 5_000
"""Most victims read for one node: far above any kubelet's maxPods (110 by default)."""


def parse_preemption_args(body: bytes) -> tuple[Mapping[str, Any], tuple[Candidate, ...]]:
    """The preemptor pod and the candidates of an ExtenderPreemptionArgs body, in the order sent;
    WireError if malformed."""
    top = as_object(decode(body), "the body")
    pod = go_field(top, "Pod")
    if pod is ABSENT or pod is None:
        raise WireError("no Pod in the body")
    pod = as_object(pod, "Pod")
    meta = go_field(top, "NodeNameToMetaVictims")
    full = go_field(top, "NodeNameToVictims")
    has_meta = meta is not ABSENT and meta is not None
    has_full = full is not ABSENT and full is not None
    if has_meta and has_full:
        raise WireError("both NodeNameToMetaVictims and NodeNameToVictims are set")
    if not (has_meta or has_full):
        return pod, ()
    field = "NodeNameToMetaVictims" if has_meta else "NodeNameToVictims"
    per_node = as_object(meta if has_meta else full, field)
    if len(per_node) > MAX_NODES:
        raise WireError(f"{field} lists {len(per_node)} nodes; at most {MAX_NODES} are read")
    return pod, tuple(
        _candidate(node, victims, field, whole_pods=has_full) for node, victims in per_node.items()
    )


def _candidate(node: str, value: Any, field: str, *, whole_pods: bool) -> Candidate:
    # Where-strings are made only for an error: a call carries thousands of victims.
    if not node:
        raise WireError(f"{field}: a candidate node name is empty")
    victims = value if isinstance(value, dict) else as_object(value, f"{field}[{node!r}]")
    pods = go_field(victims, "Pods")
    if pods is ABSENT or pods is None:
        pods = []
    if not isinstance(pods, list):
        raise WireError(f"{field}[{node!r}].Pods is {type_name(pods)}, not an array")
    if len(pods) > MAX_VICTIMS_PER_NODE:
        raise WireError(
            f"{field}[{node!r}].Pods lists {len(pods)} pods; at most "
            f"{MAX_VICTIMS_PER_NODE} are read"
        )
    uids = tuple(_victim_uid(pod, whole_pods) for pod in pods)
    if "" in uids:
        i = uids.index("")
        raise WireError(f"{field}[{node!r}].Pods[{i}] has no UID")
    violations = go_field(victims, "NumPDBViolations")
    if violations is ABSENT or violations is None:
        violations = 0
    if isinstance(violations, bool) or not isinstance(violations, int) or violations < 0:
        raise WireError(f"{field}[{node!r}].NumPDBViolations is {violations!r}, not a count")
    return Candidate(node, uids, violations)


def _victim_uid(item: Any, whole_pod: bool) -> str:
    """The victim's UID; empty when there is none to read (the caller says where)."""
    if not isinstance(item, dict):
        return ""
    if whole_pod:
        meta = go_field(item, "metadata")
        item = meta if isinstance(meta, dict) else {}
        uid = go_field(item, "uid")
    elif len(item) == 1 and "UID" in item:
        uid = item["UID"]  # as kube-scheduler writes it: no other key to weigh, as Go would
    else:
        uid = go_field(item, "UID")
    return uid if isinstance(uid, str) else ""


def preemption_response(candidates: Iterable[Candidate]) -> bytes:
    """An ExtenderPreemptionResult: the candidates kept, their victims by UID."""
    return dump_fast(
        {
            "NodeNameToMetaVictims": {
                c.node: {
                    "Pods": [{"UID": uid} for uid in c.victims],
                    "NumPDBViolations": c.pdb_violations,
                }
                for c in candidates
            }
        }
    )
