"""Typed settings read from environment variables, one class per role.

Each field of a ``EnvSettings`` subclass is one variable, named as the field in upper case, with its
documentation in the attribute docstring. Loading never raises: it returns the settings together
with every problem found, so the CLI can print all of them at once and exit with status 2. Fields
marked ``WARN_ON_INVALID`` follow the spec's rule for governor settings instead: a value that cannot
be used logs a warning and the default stays.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import UnionType
from typing import (
    Annotated,
    Any,
    ClassVar,
    Final,
    Generic,
    Self,
    TypeVar,
    Union,
    get_args,
    get_origin,
)
from urllib.parse import urlsplit

import annotated_types as at
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from joulie.api import json_body
from joulie.api.selector import SelectorError, parse_selector

# --- field markers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepts:
    """What a variable accepts, in words, for error messages and docs/configuration.md."""

    text: str


@dataclass(frozen=True)
class _Marker:
    name: str


WARN_ON_INVALID = _Marker("warn-on-invalid")
"""An unusable value logs a warning and the default is used (instead of refusing to start)."""

EMPTY_IS_VALUE = _Marker("empty-is-value")
"""An empty string is a meaningful value (otherwise an empty variable counts as unset)."""

ROLE_DEFAULT = _Marker("role-default")
"""The default written in the class is the first role's; each role has its own (the generated
reference, docs/configuration.md, says "by role" instead of one value, and `joulie config` shows
the role's)."""

EMPTY_IS_INVALID = _Marker("empty-is-invalid")
"""An empty string is checked like any other value, and so refused (or, with
``WARN_ON_INVALID``, warned about), instead of counting as unset: for variables whose spec says
that any value but the ones it lists is an error."""

# --- value types -------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)", re.ASCII)
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
MAX_DURATION_S: Final = 366 * 86400.0
"""The longest duration any variable takes: a year. Longer is a typo (99999999999h was accepted,
and the process then never did what the variable times)."""
MIN_DURATION_S: Final = 0.001
"""The shortest duration other than zero: a millisecond, the finest unit taken and shown
(0.0001 was accepted and shown as "0ms")."""


def check_duration_range(seconds: float) -> float:
    """``seconds`` if it is zero or a finite span from :data:`MIN_DURATION_S` to
    :data:`MAX_DURATION_S`; else ``ValueError`` saying which bound it misses. Applied to a value
    given in seconds too (a simulator ``--param ..._s``), where no unit is written."""
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{seconds} is not a finite duration")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{seconds:g} s is longer than a year ({format_duration(MAX_DURATION_S)})")
    if 0 < seconds < MIN_DURATION_S:
        raise ValueError(f"{seconds:g} s is shorter than a millisecond, the finest unit taken")
    return seconds


def parse_duration(text: object) -> object:
    """Go-style durations (``1m30s``, ``500ms``, ``2h``; ``0`` alone needs no unit) to float
    seconds. A number without a unit is refused, as Go's parser refuses it: ``10`` could mean
    seconds or milliseconds, and the docs always write a unit. Digits are ASCII only (``float``
    reads other scripts' digits: one second in Arabic-Indic digits had passed), and the result
    is within :func:`check_duration_range`."""
    if not isinstance(text, str):
        return text
    s = text.strip()
    if len(s) > 64:
        raise ValueError(f"not a duration: {text[:64]!r}... ({len(text)} characters)")
    if _PLAIN_NUMBER.fullmatch(s):
        if float(s) == 0:
            return 0.0
        raise ValueError(f"{s!r} has no unit: write {s}s for seconds (or ms, m, h)")
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNIT_SECONDS[m[2]]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"not a duration: {text!r}")
    try:
        return check_duration_range(total)
    except ValueError:
        if total > MAX_DURATION_S:
            raise ValueError(
                f"{text!r} is longer than a year ({format_duration(MAX_DURATION_S)})"
            ) from None
        raise ValueError(f"{text!r} is shorter than a millisecond, the finest unit taken") from None


def format_duration(seconds: float) -> str:
    if seconds < 1 and seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    out, rest = "", seconds
    for unit, size in (("h", 3600), ("m", 60)):
        if rest >= size:
            out += f"{int(rest // size)}{unit}"
            rest -= (rest // size) * size
    if rest or not out:
        out += f"{rest:g}s"
    return out


def _split_list(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


MAX_JSON_SETTING_BYTES: Final = 1024**2
"""Largest JSON value a variable may hold (a table of GPU models is a few kilobytes)."""


def parse_json(value: object) -> object:
    if isinstance(value, str):
        try:
            return json_body.loads(value, max_bytes=MAX_JSON_SETTING_BYTES, what="the value")
        except json_body.JsonBodyError as exc:
            raise ValueError(exc.reason) from None
    return value


Duration = Annotated[
    float, BeforeValidator(parse_duration), at.Gt(0), AfterValidator(check_duration_range)
]
"""A positive time span, stored in seconds."""

CommaList = Annotated[list[str], BeforeValidator(_split_list)]
"""A comma-separated list of strings."""

JSON = BeforeValidator(parse_json)
"""Marker for a variable holding JSON: parsed first, then validated as the annotation."""


def _check_address(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected host:port or :port with a port from 1 to 65535")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError("an IPv6 host must be written in brackets, e.g. [::1]:8080")
    return value


def check_url(value: str) -> str:
    """Accept an http(s) URL with a host (a ``{node}`` placeholder counts as a host name part);
    no whitespace or control characters, which an HTTP client would send or refuse later."""
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("a URL has no spaces or control characters")
    try:
        parsed = urlsplit(value.replace("{node}", "node"))
        host = parsed.hostname
        parsed.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ValueError("expected an http:// or https:// URL") from None
    if parsed.scheme not in ("http", "https") or not host:
        raise ValueError("expected an http:// or https:// URL with a host")
    return value


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_node_name(value: str) -> str:
    if value and (len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value)):
        raise ValueError("not a Kubernetes node name")
    return value


def _check_absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("not an absolute path")
    return value


NodeNameText = Annotated[
    str,
    AfterValidator(_check_node_name),
    Accepts("a node name: a lowercase DNS subdomain of at most 253 characters"),
]
"""A Kubernetes node name, or empty for none."""

AbsolutePath = Annotated[str, AfterValidator(_check_absolute), Accepts("an absolute path")]
"""A file or directory, from the root: a relative one would follow the process's working
directory."""

ListenAddress = Annotated[
    str, AfterValidator(_check_address), Accepts("host:port or :port (port 1-65535)")
]
"""Where a server listens; ``:8080`` means every interface."""

Url = Annotated[str, AfterValidator(check_url), Accepts("an http:// or https:// URL")]
"""An HTTP(S) URL; may contain a ``{node}`` placeholder where the role documents one."""


def _check_selector(value: str) -> str:
    try:
        parse_selector(value)
    except SelectorError as exc:
        raise ValueError(str(exc)) from None
    return value


LabelSelectorText = Annotated[
    str,
    AfterValidator(_check_selector),
    Accepts("a Kubernetes label selector such as joulie.io/managed=true or 'a in (x,y),!b'"),
]
"""A label selector in its string form, checked at start-up."""


def one_of(values: tuple[str, ...], what: str) -> AfterValidator:
    """A text value limited to ``values``; the error names them all."""

    def check(value: str) -> str:
        if value not in values:
            shown = ", ".join(v or '""' for v in values)
            raise ValueError(f"{value!r} is not a {what}; expected one of {shown}")
        return value

    return AfterValidator(check)


IDLE_CONNECTION_TIMEOUT_S: Final = 15.0
"""How long Joulie's HTTP servers keep a connection that is not sending a request: one that sent
nothing yet or only part of its headers, or an idle keep-alive one. aiohttp's default is about
an hour, and 300 connections left half-open made a process with 256 file descriptors unreachable,
its health probe included. Clients reconnect at their next call (kube-scheduler, Prometheus)."""


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` to (host, port); an empty host means every interface."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


# --- loading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    variable: str
    value: str
    detail: str
    accepted: str

    def __str__(self) -> str:
        return f"{self.variable}={shown(self.value)}: {self.detail} (accepted: {self.accepted})"


_SHOWN_CHARACTERS: Final = 120


def shown(value: str) -> str:
    """A raw value quoted for a message, cut short when long (a 6 KB value was echoed whole)."""
    if len(value) <= _SHOWN_CHARACTERS:
        return repr(value)
    return f"{value[:_SHOWN_CHARACTERS]!r}... ({len(value)} characters)"


class Source:
    ENVIRONMENT = "environment"
    DEFAULT = "default"
    DEFAULT_INVALID = "default (invalid value ignored)"


S = TypeVar("S", bound="EnvSettings")


@dataclass(frozen=True)
class Loaded(Generic[S]):
    settings: S
    sources: dict[str, str]
    raw: dict[str, str]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class EnvSettings(BaseModel):
    """Base of every role's settings."""

    # inf and NaN are no setting's value (PERFORMANCE_CAP_WATTS=inf was taken).
    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False
    )

    role: ClassVar[str] = ""

    @classmethod
    def env_name(cls, field_name: str) -> str:
        return field_name.upper()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Loaded[Self]:
        raw: dict[str, str] = {}
        for name, info in cls.model_fields.items():
            value = environ.get(cls.env_name(name))
            if value is None:
                continue
            value = value.strip()
            if (
                value == ""
                and not _has_marker(info, EMPTY_IS_VALUE)
                and not _has_marker(info, EMPTY_IS_INVALID)
            ):
                continue
            raw[name] = value

        problems: list[Problem] = []
        warnings: list[str] = []
        invalid: set[str] = set()
        candidate = dict(raw)
        try:
            settings = cls.model_validate(candidate)
        except ValidationError as exc:
            # Every error of a variable in one message (a JSON value can hold several).
            details: dict[str, list[str]] = {}
            for err in exc.errors(include_url=False):
                name = str(err["loc"][0]) if err["loc"] else ""
                if name in raw:
                    found = details.setdefault(name, [])
                    detail = error_detail(err, cls.model_fields[name])
                    if detail not in found:
                        found.append(detail)
            for name, found in details.items():
                invalid.add(name)
                info = cls.model_fields[name]
                detail = "; ".join(found)
                if _has_marker(info, WARN_ON_INVALID):
                    warnings.append(
                        f"{cls.env_name(name)}={shown(raw[name])} cannot be used: {detail}; "
                        f"using {describe_value(info.default)} (accepted: {accepts(info)})"
                    )
                else:
                    problems.append(Problem(cls.env_name(name), raw[name], detail, accepts(info)))
                candidate.pop(name, None)
            # Every default is valid, so with the bad values removed this cannot fail.
            settings = cls.model_validate(candidate)

        # A variable already refused is not judged again at its default (NODE_NAME=bad/name
        # was also "required").
        refused = {cls.env_name(name) for name in invalid}
        problems.extend(p for p in settings.check() if p.variable not in refused)
        warnings.extend(settings.advise())
        sources = {
            cls.env_name(name): (
                Source.DEFAULT_INVALID
                if name in invalid
                else Source.ENVIRONMENT
                if name in raw
                else Source.DEFAULT
            )
            for name in cls.model_fields
        }
        env_raw = {cls.env_name(k): v for k, v in raw.items()}
        return Loaded(settings, sources, env_raw, problems, warnings)

    def check(self) -> list[Problem]:
        """Cross-variable rules; subclasses add theirs."""
        return []

    def advise(self) -> list[str]:
        """Warnings about valid but questionable combinations; subclasses add theirs."""
        return []

    def problem(self, field_name: str, detail: str, accepted: str | None = None) -> Problem:
        info = type(self).model_fields[field_name]
        return Problem(
            self.env_name(field_name),
            describe_value(getattr(self, field_name)),
            detail,
            accepted or accepts(info),
        )

    def url_problems(self, field_name: str, required_by: str, *, template: bool) -> list[Problem]:
        """Problems with a URL variable that ``required_by`` (e.g. ``X=http``) makes mandatory."""
        value: str = getattr(self, field_name)
        what = "an http(s) URL containing {node}" if template else "an http(s) URL"
        if not value:
            return [self.problem(field_name, f"is required with {required_by}", what)]
        try:
            check_url(value)
        except ValueError as exc:
            return [self.problem(field_name, str(exc), what)]
        if template and "{node}" not in value:
            return [self.problem(field_name, "has no {node} placeholder", what)]
        return []

    def display(self, field_name: str) -> str:
        return describe_value(getattr(self, field_name), type(self).model_fields[field_name])


# --- descriptions ------------------------------------------------------------------------------


_LIMIT_WORDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def error_detail(err: Any, info: FieldInfo) -> str:
    """pydantic's message, in the units the user wrote (durations are checked in seconds). An
    error inside a structured value (a JSON object's entry) names the entry, the field and the
    value found there."""
    kind = err.get("type", "")
    inner = tuple(err.get("loc") or ())[1:]
    if kind in _LIMIT_WORDS and not inner:
        key, words = _LIMIT_WORDS[kind]
        limit = err["ctx"][key]
        shown = format_duration(float(limit)) if is_duration(info) else describe_value(limit)
        return f"must be {words} {shown}"
    message = str(err["msg"]).removeprefix("Value error, ")
    if not inner:
        return message
    where = f"entry {inner[0]!r}"
    if len(inner) > 1:
        found = json.dumps(err.get("input"), default=str)
        where += f" field {'.'.join(map(str, inner[1:]))} = {found}"
    return f"{where}: {message}"


def _has_marker(info: FieldInfo, marker: _Marker) -> bool:
    return any(m is marker for m in info.metadata)


def is_duration(info: FieldInfo | None) -> bool:
    return info is not None and any(
        isinstance(m, BeforeValidator) and m.func is parse_duration for m in info.metadata
    )


def describe_value(value: Any, info: FieldInfo | None = None) -> str:
    """A value as a user would write it in the environment."""
    if value is None:
        return "unset"
    if is_duration(info) and isinstance(value, float):
        return format_duration(value)
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return ",".join(describe_value(v) for v in value)
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", by_alias=True, exclude_none=True))
    if isinstance(value, dict):
        return json.dumps(
            {
                k: v.model_dump(mode="json", by_alias=True, exclude_none=True)
                if isinstance(v, BaseModel)
                else v
                for k, v in value.items()
            },
            separators=(",", ":"),
        )
    return str(value)


def describe_bounds(info: FieldInfo) -> str:
    def show(value: Any) -> str:
        return format_duration(float(value)) if is_duration(info) else describe_value(value)

    # The strictest bound on each side only: a Duration is > 0s by type, and a variable that
    # adds ">= 1s" should not read "> 0s and >= 1s".
    lower: tuple[Any, str] | None = None
    upper: tuple[Any, str] | None = None
    for m in info.metadata:
        if isinstance(m, at.Ge | at.Gt):
            low: Any = m.ge if isinstance(m, at.Ge) else m.gt
            if lower is None or low > lower[0]:
                lower = (low, f"{'>=' if isinstance(m, at.Ge) else '>'} {show(low)}")
        elif isinstance(m, at.Le | at.Lt):
            high: Any = m.le if isinstance(m, at.Le) else m.lt
            if upper is None or high < upper[0]:
                upper = (high, f"{'<=' if isinstance(m, at.Le) else '<'} {show(high)}")
    return " and ".join(bound[1] for bound in (lower, upper) if bound is not None)


def accepts(info: FieldInfo) -> str:
    """What a variable accepts, in words."""
    for m in info.metadata:
        if isinstance(m, Accepts):
            return m.text
    annotation = info.annotation
    if get_origin(annotation) is Annotated:  # pragma: no cover - pydantic unwraps these
        annotation = get_args(annotation)[0]
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    if type(None) in members and len(members) == 2:
        # An optional variable: what its value accepts, or nothing (the default applies).
        inner = next(m for m in members if m is not type(None))
        return f"{accepts(FieldInfo.merge_field_infos(info, annotation=inner))}, or unset"
    bounds = describe_bounds(info)
    suffix = f" {bounds}" if bounds else ""
    if is_duration(info):
        return f"a duration with its unit, such as 500ms, 30s, 1m or 1h30m,{suffix}"
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return f"an integer{suffix}"
    if annotation is float:
        return f"a number{suffix}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(str(e.value) for e in annotation)
    if get_origin(annotation) is list:
        return "a comma-separated list"
    return "text"
