"""The extender's HTTP server: kube-scheduler's filter and prioritize calls, a readiness probe
and a debug view of one node's score.

kube-scheduler waits for the extender on every scheduling cycle, so the server never makes it wait
for long and never answers its calls with a 5xx. A body it could not have sent gets 400 with the
reason; a body over EXTENDER_MAX_BODY_BYTES gets 413; a body that does not arrive within
EXTENDER_REQUEST_TIMEOUT gets 408, and one that finds other calls holding the extender for all of
that time 429 (with ``ignorable: true``, kube-scheduler then goes on without
the extender). Once the body is read, the extender answers 200 whatever happens: when the time
limit is already spent, or the placement fails or breaks its contract, filter passes every node
and prioritize scores every node alike, an answer that lists no node (an "Error" in a filter
answer would fail the pod's scheduling attempt). The placement is called inline on the event
loop: its work is microseconds to milliseconds of CPU and needs no thread. How a body is taken
(one call at a time, within the limits, a large one read off the loop) is
:mod:`joulie.extender.intake`.

Routes:

- ``POST /filter``, ``POST /prioritize``: ExtenderArgs in, ExtenderFilterResult /
  HostPriorityList out (``joulie.extender.wire``).
- ``POST /preempt``: ExtenderPreemptionArgs in, ExtenderPreemptionResult out: the candidates
  kube-scheduler may go on with (``joulie.core.preemption_candidates``); when the extender cannot
  decide, the candidates as sent.
- ``GET /readyz``: 200 when the placement is ready, else 503 (a probe on the extender's own port).
- ``GET /debug/score?node=NAME``, only with EXTENDER_DEBUG=true (it needs no authentication
  and shows every node's power, class and the manager's Lease state): the placement's score
  terms for one node, as JSON. The pod is
  the JSON body (a v1.Pod, as ``kubectl get pod -o json`` prints it; POST works too, for clients
  that cannot send a GET body) or, without a body, one made up from the query:
  ``class=performance|standard`` (default standard), ``cpu=4``, ``memory=16Gi`` (requests, as
  Kubernetes quantities) and ``gpus=1`` (nvidia.com/gpu).
"""

from __future__ import annotations

import asyncio
import gc
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import structlog
from aiohttp import web

from joulie.api.enums import WorkloadClass
from joulie.api.keys import WORKLOAD_CLASS_ANNOTATION
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.core.pod_power import is_performance_pod
from joulie.core.preemption_candidates import Candidate
from joulie.core.scoring import NEUTRAL_PRIORITY
from joulie.extender import wire, wire_preempt
from joulie.extender.failure_log import FailureLog
from joulie.extender.intake import Answer, BodyIntake, Refused, text_answer
from joulie.extender.metrics import Outcome, Verb, record
from joulie.extender.settings import ExtenderSettings
from joulie.settings import IDLE_CONNECTION_TIMEOUT_S, split_address

log = structlog.get_logger("joulie.extender")
_T = TypeVar("_T")


class Placement(Protocol):
    """The decisions behind the HTTP face; every method is synchronous and quick."""

    def ready(self) -> bool:
        """Whether the caches the decisions read are synced."""

    def filter(
        self,
        pod: Mapping[str, Any],
        nodes: Sequence[str],
        labels: Mapping[str, Mapping[str, str]] | None,
    ) -> Sequence[str | None]:
        """For each node, in order: None when the pod may run on it, else why it may not (a
        non-empty string; kube-scheduler shows it in the pod's FailedScheduling event).
        ``labels`` holds each node's labels when kube-scheduler sent whole Node objects, None
        when it sent names only."""

    def prioritize(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> wire.Scores:
        """A score from 0 to 10 for each node, in the order of ``nodes``."""

    def names_distinct(self, nodes: tuple[Any, ...]) -> bool:
        """Whether every item of a call's NodeNames is a non-empty string given once, told
        from the placement's own lookup of the names, which the prioritize (or a performance
        pod's filter) that follows may then reuse (for the same tuple). False when it cannot
        tell: the server then checks the names itself."""

    def preempt(
        self, pod: Mapping[str, Any], candidates: Sequence[Candidate]
    ) -> Sequence[Candidate]:
        """The preemption candidates kube-scheduler may go on with: some of the very objects in
        ``candidates``, each at most once."""

    def explain(self, pod: Mapping[str, Any], node: str) -> Mapping[str, Any]:
        """The terms of the pod's score on the node, for people (JSON-serialisable)."""


class TlsError(Exception):
    """The TLS certificate or key cannot be used; the message names the variables."""


def tls_context(settings: ExtenderSettings) -> ssl.SSLContext | None:
    """The server-side TLS context of EXTENDER_TLS_CERT_FILE / _KEY_FILE; None for plain HTTP."""
    if not settings.tls:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.extender_tls_cert_file, settings.extender_tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(
            f"EXTENDER_TLS_CERT_FILE={settings.extender_tls_cert_file!r} and "
            f"EXTENDER_TLS_KEY_FILE={settings.extender_tls_key_file!r} cannot be used: {exc}"
        ) from None
    return context


# --- answers ------------------------------------------------------------------------------------


def debug_pod(query: Mapping[str, str]) -> dict[str, Any]:
    """A minimal pod from the debug view's query (class, cpu, memory, gpus); WireError if bad."""
    unknown = set(query).difference({"node", "class", "cpu", "memory", "gpus"})
    if unknown:
        raise wire.WireError(
            f"unknown query parameter(s) {', '.join(sorted(unknown))}; "
            "accepted: node, class, cpu, memory, gpus"
        )
    workload = query.get("class", WorkloadClass.STANDARD.value)
    if workload not in {c.value for c in WorkloadClass}:
        raise wire.WireError(f"class={workload!r}: expected performance or standard")
    requests: dict[str, str] = {}
    for name in ("cpu", "memory"):
        if name in query:
            try:
                if parse_quantity(query[name]) < 0:
                    raise QuantityError("negative")
            except QuantityError:
                raise wire.WireError(
                    f"{name}={query[name]!r}: expected a Kubernetes quantity such as 4 or 16Gi"
                ) from None
            requests[name] = query[name]
    limits: dict[str, str] = {}
    if "gpus" in query:
        gpus = query["gpus"]
        if not (gpus.isascii() and gpus.isdigit()):
            raise wire.WireError(f"gpus={gpus!r}: expected a whole number of GPUs")
        if int(gpus):
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(int(gpus))
    return {
        "metadata": {
            "name": "debug",
            "namespace": "default",
            "annotations": {WORKLOAD_CLASS_ANNOTATION: workload},
        },
        "spec": {
            "containers": [{"name": "debug", "resources": {"requests": requests, "limits": limits}}]
        },
    }


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while one request is decided (synchronously, so no other
    work runs meanwhile). A body of 5,000 Node objects decodes to hundreds of thousands of
    containers, which the collector would otherwise walk several times while they are built,
    although reference counting frees them all once the answer is made (decoded JSON holds no
    cycles); CPython also takes freed objects off its count of new ones, so none falls due for
    them afterwards. So no name may hold the decoded request past the pause (each handler passes
    it straight on): a collection after it would walk all of it as new objects, 80 ms for each
    5,000-Node body (bench.extender)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- the application ---------------------------------------------------------------------------


def extender_app(
    placement: Placement,
    settings: ExtenderSettings,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    """The extender's routes over ``placement``; ``clock`` (seconds) times each request."""
    limit_s = settings.extender_request_timeout
    max_body = settings.extender_max_body_bytes
    failures = FailureLog(clock)
    lists = wire.NameLists()
    intake = BodyIntake(
        max_body=max_body, limit_s=limit_s, clock=clock, failures=failures, lists=lists
    )

    def overdue(verb: Verb, nodes: int, started: float) -> bool:
        """Whether the time limit was spent before the placement could be asked."""
        elapsed = clock() - started
        if elapsed <= limit_s:
            return False
        failures.report(
            (verb.value, "timeout"),
            "request time limit spent before deciding; answering without the placement",
            verb=verb.value,
            nodes=nodes,
            elapsed_s=round(elapsed, 3),
            limit_s=limit_s,
        )
        return True

    def decided(verb: Verb, started: float, nodes: int) -> Outcome:
        """OK, or LATE when the decision came after the time limit (it is answered all the same:
        it is the better answer, and kube-scheduler may still be waiting for it)."""
        elapsed = clock() - started
        if elapsed <= limit_s:
            return Outcome.OK
        failures.report(
            (verb.value, "late"),
            "placement decided after the request time limit",
            verb=verb.value,
            nodes=nodes,
            elapsed_s=round(elapsed, 3),
            limit_s=limit_s,
        )
        return Outcome.LATE

    def names_check(verb: Verb) -> wire.NamesCheck:
        def names_distinct(nodes: tuple[Any, ...]) -> bool:
            try:
                return placement.names_distinct(nodes) is True
            except Exception as exc:  # the server checks the names itself
                failures.internal(verb.value, exc, nodes=len(nodes))
                return False

        return names_distinct

    filter_names_distinct = names_check(Verb.FILTER)
    prioritize_names_distinct = names_check(Verb.PRIORITIZE)

    async def filter_nodes(request: web.Request, started: float) -> Answer:
        async with intake.turn(started):
            body = await intake.read_body(request, started, limit_s)
            with _collector_paused():
                # A performance pod's names are looked up to be filtered, and the lookup checks
                # them too; a standard pod's are not, so a set checks them instead.
                reading = intake.parse(body, Verb.FILTER, filter_names_distinct, is_performance_pod)
                return filter_answer(await reading, started)

    def filter_answer(args: wire.ExtenderArgs, started: float) -> Answer:
        count = len(args.names)
        if overdue(Verb.FILTER, count, started):
            return Answer(200, wire.pass_all_response(args), Outcome.TIMEOUT, count)
        try:
            reasons = placement.filter(args.pod, args.names, args.labels)
            body = wire.filter_response(args, reasons, lists=lists)
        except Exception as exc:
            failures.internal(Verb.FILTER.value, exc, nodes=count)
            return Answer(200, wire.pass_all_response(args), Outcome.INTERNAL_ERROR, count)
        return Answer(200, body, decided(Verb.FILTER, started, count), count)

    async def prioritize(request: web.Request, started: float) -> Answer:
        async with intake.turn(started):
            body = await intake.read_body(request, started, limit_s)
            with _collector_paused():
                # The names are looked up to be scored: the lookup checks them too.
                reading = intake.parse(body, Verb.PRIORITIZE, prioritize_names_distinct)
                return prioritize_answer(await reading, started)

    def prioritize_answer(args: wire.ExtenderArgs, started: float) -> Answer:
        count = len(args.names)
        neutral = [NEUTRAL_PRIORITY] * count
        if overdue(Verb.PRIORITIZE, count, started):
            body = wire.prioritize_response(args.names, neutral, args.plain)
            return Answer(200, body, Outcome.TIMEOUT, count)
        try:
            scores = placement.prioritize(args.pod, args.names)
            body = wire.prioritize_response(args.names, scores, args.plain)
        except Exception as exc:
            failures.internal(Verb.PRIORITIZE.value, exc, nodes=count)
            body = wire.prioritize_response(args.names, neutral, args.plain)
            return Answer(200, body, Outcome.INTERNAL_ERROR, count)
        return Answer(200, body, decided(Verb.PRIORITIZE, started, count), count)

    async def preempt(request: web.Request, started: float) -> Answer:
        async with intake.turn(started):
            body = await intake.read_body(request, started, limit_s)
            with _collector_paused():
                reading = intake.off_loop(
                    body, Verb.PREEMPT, lambda: wire_preempt.parse_preemption_args(body)
                )
                return preempt_answer(*await reading, started)

    def preempt_answer(
        pod: Mapping[str, Any], candidates: tuple[Candidate, ...], started: float
    ) -> Answer:
        count = len(candidates)
        # Without a decision, kube-scheduler's own choice stands: the candidates as sent.
        if overdue(Verb.PREEMPT, count, started):
            return Answer(200, wire_preempt.preemption_response(candidates), Outcome.TIMEOUT, count)
        try:
            kept = list(placement.preempt(pod, candidates))
            # The very objects it was sent (so none altered), each at most once.
            sent = {id(c) for c in candidates}
            if not all(id(c) in sent for c in kept) or len({id(c) for c in kept}) != len(kept):
                raise ValueError("preempt returned a candidate it was not sent")
            body = wire_preempt.preemption_response(kept)
        except Exception as exc:
            failures.internal(Verb.PREEMPT.value, exc, nodes=count)
            body = wire_preempt.preemption_response(candidates)
            return Answer(200, body, Outcome.INTERNAL_ERROR, count)
        return Answer(200, body, decided(Verb.PREEMPT, started, count), count)

    async def debug_score(request: web.Request, started: float) -> Answer:
        node = request.query.get("node", "")
        if not node:
            return text_answer(400, Outcome.BAD_REQUEST, "give the node as ?node=NAME")
        body = await intake.read_body(request, started, None)
        try:
            if body.strip():
                if set(request.query) != {"node"}:
                    raise wire.WireError("give the pod as a JSON body or as query parameters")
                pod = wire.parse_pod(body)
            else:
                pod = debug_pod(request.query)
        except wire.WireError as exc:
            return text_answer(400, Outcome.BAD_REQUEST, exc.reason)
        try:
            terms = placement.explain(pod, node)
            answer = json.dumps(
                {"node": node, "pod": _pod_key(pod), "terms": terms}, indent=2, default=str
            )
        except Exception as exc:
            failures.internal(Verb.DEBUG_SCORE.value, exc, node=node)
            reason = f"cannot explain {node}: {type(exc).__name__}: {exc}"
            return text_answer(500, Outcome.INTERNAL_ERROR, reason)
        return Answer(200, (answer + "\n").encode(), Outcome.OK)

    def handler(
        verb: Verb, answer: Callable[[web.Request, float], Awaitable[Answer]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            started = clock()
            try:
                result = await answer(request, started)
            except Refused as refused:
                result = refused.answer
            except asyncio.CancelledError:  # aiohttp cancels a handler whose caller hung up
                record(verb, Outcome.ABANDONED, clock() - started)
                raise
            record(verb, result.outcome, clock() - started, result.nodes)
            return web.Response(
                status=result.status, body=result.body, content_type=result.content_type
            )

        return handle

    async def readyz(_: web.Request) -> web.Response:
        try:
            ready = placement.ready()
        except Exception as exc:
            failures.internal("readyz", exc)
            ready = False
        if ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    async def stop_reader(_: web.Application) -> None:
        intake.close()

    app = web.Application(client_max_size=max_body)
    app.on_cleanup.append(stop_reader)
    app.router.add_post("/filter", handler(Verb.FILTER, filter_nodes))
    app.router.add_post("/prioritize", handler(Verb.PRIORITIZE, prioritize))
    app.router.add_post("/preempt", handler(Verb.PREEMPT, preempt))
    if settings.extender_debug:
        app.router.add_get("/debug/score", handler(Verb.DEBUG_SCORE, debug_score))
        app.router.add_post("/debug/score", handler(Verb.DEBUG_SCORE, debug_score))
    app.router.add_get("/readyz", readyz)
    return app


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


async def serve(
    app: web.Application,
    settings: ExtenderSettings,
    stopping: asyncio.Event,
    *,
    on_listening: Callable[[list[Any]], None] | None = None,
) -> None:
    """Serve ``app`` on EXTENDER_ADDR (HTTPS when the TLS files are set) until ``stopping`` is
    set. ``on_listening`` gets the bound socket addresses once the port is open. TlsError when
    the certificate or key cannot be used; OSError when the address cannot be bound."""
    context = tls_context(settings)
    # In-flight calls are short; on shutdown they get their own time limit to finish.
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=settings.extender_request_timeout,
        keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S,
    )
    await runner.setup()
    try:
        host, port = split_address(settings.extender_addr)
        site = web.TCPSite(runner, host or None, port, ssl_context=context)
        await site.start()
        log.info("serving", address=settings.extender_addr, tls=context is not None)
        if on_listening is not None:
            on_listening(list(runner.addresses))
        await stopping.wait()
    finally:
        await runner.cleanup()
