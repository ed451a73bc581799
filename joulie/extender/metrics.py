"""The extender's HTTP metrics: how kube-scheduler's calls went and how long they took.

Series are per verb and outcome only, never per node or per pod.
"""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import Counter, Histogram


class Verb(StrEnum):
    FILTER = "filter"
    PRIORITIZE = "prioritize"
    PREEMPT = "preempt"
    DEBUG_SCORE = "debug_score"


class Outcome(StrEnum):
    OK = "ok"
    """Answered with the placement's decision in time."""
    LATE = "late"
    """Answered with the placement's decision, but after the request time limit."""
    TIMEOUT = "timeout"
    """The time limit ran out before the placement was asked: every node passes, scores neutral
    (or 408 when the body itself did not arrive in time)."""
    BAD_REQUEST = "bad_request"
    """A body kube-scheduler could not have sent: 400."""
    TOO_LARGE = "too_large"
    """A body over EXTENDER_MAX_BODY_BYTES: 413."""
    ABANDONED = "abandoned"
    """The caller hung up while its body was being read (kube-scheduler's httpTimeout, most
    likely); nothing was answered."""
    INTERNAL_ERROR = "internal_error"
    """The placement failed or broke its contract: every node passes, scores neutral."""


REQUESTS = Counter(
    "joulie_extender_requests_total",
    "Requests to the scheduler extender, by verb and outcome (timeout and internal_error answers "
    "pass every node and score all nodes alike)",
    ["verb", "outcome"],
)
DURATION = Histogram(
    "joulie_extender_request_duration_seconds",
    "Time from the start of a request's handling to its answer, body reading and parsing included",
    ["verb"],
    buckets=(
        0.0001,
        0.00025,
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
    ),
)
NODES = Histogram(
    "joulie_extender_nodes_per_request",
    "Candidate nodes in one filter or prioritize request",
    ["verb"],
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)


def record(verb: Verb, outcome: Outcome, seconds: float, nodes: int | None = None) -> None:
    REQUESTS.labels(verb.value, outcome.value).inc()
    DURATION.labels(verb.value).observe(seconds)
    if nodes is not None:
        NODES.labels(verb.value).observe(nodes)
