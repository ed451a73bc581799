"""Shared pydantic configuration for Kubernetes-facing models.

Wire names are camelCase, Python names snake_case; unknown fields are kept so that an object written
by a newer Joulie survives a read-modify-write by an older one. Attribute docstrings become field
descriptions, which end up in the CRD schema and in ``kubectl explain``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from joulie.api.enums import ConditionStatus


class K8sModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
        use_attribute_docstrings=True,
        # Validators and serializers are built on a model's first use: a role uses a few of
        # the API's models, and building all of them at import cost about 1 MiB of RSS
        # (ru_maxrss after importing a role: manager 73.2 -> 72.5 MiB).
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, no empty fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Timestamp = Annotated[datetime, PlainSerializer(_rfc3339, return_type=str)]
"""An RFC 3339 time, serialised in UTC with a ``Z`` suffix as Kubernetes does."""


def _compact(value: float) -> float | int:
    return int(value) if value.is_integer() else value


Number = Annotated[float, PlainSerializer(_compact, return_type=float | int)]
"""A JSON number; whole values are written without a fraction (``60``, not ``60.0``), as
Kubernetes objects conventionally carry them, so objects round-trip to the same text."""

Percent = Annotated[Number, Field(gt=0, le=100)]
"""A percentage in (0, 100]."""

Watts = Annotated[Number, Field(ge=1)]
"""A power value in watts, at least 1 W."""

NonNegative = Annotated[Number, Field(ge=0)]

NonNegativeInt = Annotated[int, Field(ge=0)]


class ObjectMeta(K8sModel):
    """The part of metadata Joulie reads; everything else is carried through untouched."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    resource_version: str | None = None
    generation: int | None = None
    uid: str | None = None


class Condition(K8sModel):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    status: ConditionStatus
    reason: Annotated[str, Field(max_length=1024)] | None = None
    message: Annotated[str, Field(max_length=32768)] | None = None
    last_transition_time: Timestamp | None = None
    observed_generation: NonNegativeInt | None = None
