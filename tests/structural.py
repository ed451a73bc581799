"""A small checker for the OpenAPI v3 subset that CRD schemas use.

It lets unit tests say "the API server's schema would reject this object" without an API server;
the kube tests then confirm the same objects against a real one.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def schema_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every way ``value`` violates ``schema`` (type, enum, bounds, lengths, required, nesting)."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            return [f"{path or '<root>'}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema:
        low = schema["minimum"]
        if value < low or (schema.get("exclusiveMinimum") and value == low):
            errors.append(f"{path}: {value} below minimum {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if value > high or (schema.get("exclusiveMaximum") and value == high):
            errors.append(f"{path}: {value} above maximum {high}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if kind == "object":
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                errors += schema_errors(props[key], sub, f"{path}.{key}")
            elif isinstance(extra, dict):
                errors += schema_errors(extra, sub, f"{path}.{key}")
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{path}[{i}]")
    return errors


_FORBIDDEN = (
    "$ref",
    "$defs",
    "definitions",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "const",
    "uniqueItems",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "id",
)


def structural_problems(schema: dict[str, Any], path: str = "") -> list[str]:
    """Where a schema breaks the API server's structural-schema rules (that we rely on)."""
    problems = [f"{path}: {key} is not allowed" for key in _FORBIDDEN if key in schema]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-int-or-string"
    )
    if "type" not in schema and not preserve:
        problems.append(f"{path or '<root>'}: no type")
    elif schema.get("type") not in (None, *_TYPES):
        problems.append(f"{path}: unknown type {schema['type']!r}")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in schema and not isinstance(schema[key], bool):
            problems.append(f"{path}: {key} must be a boolean in OpenAPI v3.0")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties together")
    if schema.get("default", ...) is None:
        problems.append(f"{path}: null default")
    for name, sub in schema.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}[]")
    elif "items" in schema:
        problems.append(f"{path}: items must be one schema")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}{{}}")
    return problems
