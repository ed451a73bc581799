"""Kubernetes label selectors in their string form (``a=b,c!=d,e in (f,g),!h``).

Parsed once (for example NODE_SELECTOR at start-up, with a precise message when it is malformed)
and then matched against label maps, or sent to the API server in canonical form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_SET = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_CMP = re.compile(r"^(?P<key>[^\s!=]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^\s!=]*)$")


class SelectorError(ValueError):
    pass


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    NOT_EXISTS = "!"


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.op:
            case Operator.EXISTS:
                return present
            case Operator.NOT_EXISTS:
                return not present
            case Operator.EQUALS | Operator.IN:
                return present and labels[self.key] in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or labels[self.key] not in self.values
        raise AssertionError(self.op)  # pragma: no cover

    def __str__(self) -> str:
        match self.op:
            case Operator.EXISTS:
                return self.key
            case Operator.NOT_EXISTS:
                return f"!{self.key}"
            case Operator.EQUALS | Operator.NOT_EQUALS:
                return f"{self.key}{self.op.value}{self.values[0]}"
            case _:
                return f"{self.key} {self.op.value} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a value set's parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms]


def _check_key(key: str) -> str:
    if not _KEY.match(key) or len(key.split("/")[0]) > 253:
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(f"invalid label value {value!r}")
    return value


def parse_selector(text: str) -> LabelSelector:
    """Parse a selector; the empty string selects everything."""
    if not text.strip():
        return LabelSelector(())
    requirements = []
    for term in _split_terms(text):
        if not term:
            raise SelectorError(f"empty term in selector {text!r}")
        if m := _SET.match(term):
            values = tuple(_check_value(v.strip()) for v in m["values"].split(","))
            op = Operator.IN if m["op"] == "in" else Operator.NOT_IN
            requirements.append(Requirement(_check_key(m["key"]), op, values))
        elif m := _CMP.match(term):
            op = Operator.NOT_EQUALS if m["op"] == "!=" else Operator.EQUALS
            values = (_check_value(m["value"]),)
            requirements.append(Requirement(_check_key(m["key"]), op, values))
        elif term.startswith("!"):
            requirements.append(Requirement(_check_key(term[1:].strip()), Operator.NOT_EXISTS))
        else:
            requirements.append(Requirement(_check_key(term), Operator.EXISTS))
    return LabelSelector(tuple(requirements))
