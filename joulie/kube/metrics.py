"""Client-side metrics of Joulie's traffic with the API server, so tests and operators see the load
it causes (a reconcile at constant demand should add no write requests)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "joulie_kube_requests_total",
    "Requests sent to the Kubernetes API server",
    ["verb", "resource", "code"],
)
REQUEST_SECONDS = Histogram(
    "joulie_kube_request_duration_seconds",
    "Latency of Kubernetes API requests (for watches: until the stream opened)",
    ["verb", "resource"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
WATCH_RESTARTS = Counter(
    "joulie_kube_watch_restarts_total",
    "Watch streams that ended and were opened again, by reason",
    ["resource", "reason"],
)
RELISTS = Counter(
    "joulie_kube_relists_total",
    "Full lists after the first one (the watch fell too far behind, or failed)",
    ["resource"],
)
WATCH_EVENTS = Counter(
    "joulie_kube_watch_events_total",
    "Watch events applied to informer stores",
    ["resource", "type"],
)
MALFORMED = Counter(
    "joulie_kube_malformed_objects_total",
    "Objects or watch lines that could not be decoded and were skipped",
    ["resource"],
)

WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete", "deletecollection"})


def observe_request(verb: str, resource: str, code: str, seconds: float) -> None:
    REQUESTS.labels(verb, resource, code).inc()
    REQUEST_SECONDS.labels(verb, resource).observe(seconds)


def write_count(resource: str | None = None) -> float:
    """Write requests sent so far (optionally for one resource): what tests compare."""
    total = 0.0
    for metric in REQUESTS.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            if labels["verb"] in WRITE_VERBS and resource in (None, labels["resource"]):
                total += sample.value
    return total
