"""Instant queries against the Prometheus HTTP API (``GET /api/v1/query``).

The parsing is separate from the request so that every malformed answer a server (or a proxy in
front of it) can give is testable: each becomes a :class:`QueryError` naming what was wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joulie.api import json_body

if TYPE_CHECKING:
    import httpx

__all__ = ["QueryError", "Series", "instant_query", "parse_instant_result", "single_value"]


class QueryError(Exception):
    """A query that gave no usable answer; the message says why."""


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    value: float


def parse_instant_result(body: Any) -> list[Series]:
    """The series of an instant-query answer (a vector, or a scalar as one unlabelled series).

    Values that are not finite numbers (NaN from a division by zero, ``+Inf``) are kept: only the
    caller knows whether they matter.
    """
    if not isinstance(body, Mapping):
        raise QueryError("the answer is not a JSON object")
    if body.get("status") != "success":
        detail = body.get("error") or body.get("errorType") or "no error message"
        raise QueryError(f"Prometheus answered status {body.get('status')!r}: {detail}")
    data = body.get("data")
    if not isinstance(data, Mapping):
        raise QueryError("the answer has no data object")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return [Series({}, _number(result))]
    if kind != "vector":
        raise QueryError(f"the query returned a {kind!r}, not an instant vector")
    if not isinstance(result, list):
        raise QueryError("the vector result is not a list")
    series = []
    for item in result:
        if not isinstance(item, Mapping) or not isinstance(item.get("metric"), Mapping):
            raise QueryError("a series of the result has no metric labels")
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        series.append(Series(labels, _number(item.get("value"))))
    return series


def _number(pair: Any) -> float:
    if not isinstance(pair, list) or len(pair) != 2:
        raise QueryError("a sample is not a [timestamp, value] pair")
    try:
        return float(pair[1])
    except (TypeError, ValueError):
        raise QueryError(f"the sample value {pair[1]!r} is not a number") from None


def single_value(series: list[Series], query: str) -> float:
    """The one finite value a query for a single figure must return."""
    if len(series) != 1:
        raise QueryError(
            f"{query!r} returned {len(series)} series; it must return exactly one "
            "(aggregate it, for example sum(...) or avg(...))"
        )
    value = series[0].value
    if not math.isfinite(value):
        raise QueryError(f"{query!r} returned {value}")
    return value


MAX_ANSWER_BYTES = 64 * 1024**2
"""Largest query answer read: a series per node is about 200 bytes, so this holds hundreds of
thousands of nodes; a bigger answer is refused as it streams in."""


async def instant_query(client: httpx.AsyncClient, address: str, query: str) -> list[Series]:
    """Run ``query`` once; transport failures and HTTP errors become :class:`QueryError`."""
    import httpx  # loaded with the caller's client; named here for the except clause

    url = address.rstrip("/") + "/api/v1/query"
    try:
        async with client.stream("GET", url, params={"query": query}) as response:
            raw = await json_body.read_capped(
                response.aiter_bytes(), MAX_ANSWER_BYTES, f"{url}'s answer"
            )
    except httpx.HTTPError as exc:
        raise QueryError(f"{url}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
    except json_body.JsonBodyError as exc:
        raise QueryError(exc.reason) from None
    try:
        body = json_body.loads(raw, max_bytes=MAX_ANSWER_BYTES)
    except json_body.JsonBodyError:
        body = None
    if response.status_code != 200 and not (isinstance(body, Mapping) and "error" in body):
        raise QueryError(f"{url} answered HTTP {response.status_code}")
    return parse_instant_result(body)
