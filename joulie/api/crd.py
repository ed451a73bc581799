"""CustomResourceDefinitions generated from the pydantic models.

pydantic emits JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3.0 schema. The
post-pass below bridges the two: it inlines ``$ref``s, turns ``X | None`` into a plain optional
field, ``const`` into a one-value ``enum``, numeric exclusive bounds into the boolean OpenAPI form,
and drops what the API server rejects or prunes (``title``, null defaults, ``additionalProperties:
true`` from ``extra="allow"``, ``uniqueItems``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from joulie.api.keys import (
    AGENT_REPORTING_CONDITION,
    GROUP,
    NODE_HARDWARE_KIND,
    NODE_HARDWARE_PLURAL,
    NODE_TWIN_KIND,
    NODE_TWIN_PLURAL,
    VERSION,
)
from joulie.api.nodehardware import NodeHardwareSpec, NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinSpec, NodeTwinStatus

JsonSchema = dict[str, Any]

_DROPPED_KEYS = frozenset({"title", "uniqueItems", "$defs", "$schema"})


class SchemaError(ValueError):
    """The model cannot be expressed as a structural CRD schema."""


def structural_schema(model: type[BaseModel]) -> JsonSchema:
    """The structural OpenAPI v3 schema of one pydantic model, ready for a CRD."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, JsonSchema] = raw.get("$defs", {})
    return _convert(raw, defs, path=model.__name__)


def _resolve(ref: str, defs: dict[str, JsonSchema], path: str) -> JsonSchema:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise SchemaError(f"{path}: unresolvable $ref {ref!r}")
    return defs[ref[len(prefix) :]]


def _convert(node: JsonSchema, defs: dict[str, JsonSchema], path: str) -> JsonSchema:
    node = dict(node)
    while "$ref" in node or "anyOf" in node:
        if "anyOf" in node:
            branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
            if len(branches) != 1:
                raise SchemaError(f"{path}: a union of several types has no structural form")
            node = {**branches[0], **node}
        if "$ref" in node:
            target = _resolve(node.pop("$ref"), defs, path)
            # Keys written beside the $ref (a field's own description) win over the target's.
            node = {**target, **node}
    if node.get("default", ...) is None:
        del node["default"]

    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out[key] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, f"{path}{{}}")
            # `true` (from extra="allow") is dropped: unknown fields are pruned by the server.
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "type" not in out:
        raise SchemaError(f"{path}: every schema node needs a type")
    return _ordered(out)


_KEY_ORDER = {
    key: rank
    for rank, key in enumerate(
        (
            "description",
            "type",
            "format",
            "required",
            "enum",
            "minimum",
            "exclusiveMinimum",
            "maximum",
            "exclusiveMaximum",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "items",
            "properties",
            "additionalProperties",
        )
    )
}


def _ordered(node: JsonSchema) -> JsonSchema:
    """Keys in a fixed reading order (description and type first, x-kubernetes-* last)."""
    return dict(
        sorted(node.items(), key=lambda kv: (_KEY_ORDER.get(kv[0], len(_KEY_ORDER)), kv[0]))
    )


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""

    def to_wire(self) -> dict[str, Any]:
        col: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            col["priority"] = self.priority
        if self.description:
            col["description"] = self.description
        return col


@dataclass(frozen=True)
class CrdInfo:
    kind: str
    plural: str
    short_name: str
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[PrinterColumn, ...]
    description: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")

NODE_TWIN_CRD = CrdInfo(
    kind=NODE_TWIN_KIND,
    plural=NODE_TWIN_PLURAL,
    short_name="nt",
    spec=NodeTwinSpec,
    status=NodeTwinStatus,
    description="Desired power state of one node (spec) and the twin's view of it (status).",
    columns=(
        PrinterColumn("Node", ".spec.nodeName"),
        PrinterColumn("Profile", ".spec.profile"),
        PrinterColumn("Class", ".status.schedulableClass"),
        PrinterColumn(
            "Agent",
            f'.status.conditions[?(@.type=="{AGENT_REPORTING_CONDITION}")].status',
            description="Whether a node agent publishes this node's NodeHardware",
        ),
        PrinterColumn("CPU-Gov", ".spec.cpu.governor.preset"),
        PrinterColumn("GPU-Gov", ".spec.gpu.governor.preset"),
        PrinterColumn("Headroom", ".status.predictedPowerHeadroomScore", type="number", priority=1),
        PrinterColumn(
            "Power-W", ".status.powerMeasurement.measuredNodePowerW", type="number", priority=1
        ),
        _AGE,
    ),
)

NODE_HARDWARE_CRD = CrdInfo(
    kind=NODE_HARDWARE_KIND,
    plural=NODE_HARDWARE_PLURAL,
    short_name="nhw",
    spec=NodeHardwareSpec,
    status=NodeHardwareStatus,
    description="Hardware of one node as its Joulie agent discovered it, and what it can control.",
    columns=(
        PrinterColumn("Node", ".spec.nodeName"),
        PrinterColumn("CPU", ".status.cpu.model"),
        PrinterColumn("GPU", ".status.gpu.model"),
        PrinterColumn("GPUs", ".status.gpu.count", type="integer"),
        PrinterColumn("Quality", ".status.quality.overall"),
        _AGE,
    ),
)

ALL_CRDS = (NODE_HARDWARE_CRD, NODE_TWIN_CRD)


def crd_manifest(info: CrdInfo) -> dict[str, Any]:
    """The full apiextensions.k8s.io/v1 CustomResourceDefinition for one kind."""
    root: JsonSchema = {
        "description": info.description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural_schema(info.spec),
            "status": structural_schema(info.status),
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.metadata.name == self.spec.nodeName",
                "message": "the object must be named after its node (name == spec.nodeName)",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.kind.lower(),
                "shortNames": [info.short_name],
                "categories": ["joulie"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [c.to_wire() for c in info.columns],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_file_name(info: CrdInfo) -> str:
    return f"{GROUP}_{info.plural}.yaml"
