"""Powering a node off, and on again, by asking an HTTP service to do it (IPMI, Redfish, a cloud
API, a script).

The wire format, for whoever writes the receiving end
-----------------------------------------------------

One ``POST`` to the configured URL per attempt, power-offs and power-ons alike: a receiver
switches on ``action``. ``START_SHUTDOWN`` and ``START_DRAIN`` power the node off, with this
JSON body::

    {"node": "worker-7",                 # the Node's name
     "uid": "5f0c...",                   # the Node's metadata.uid
     "providerID": "aws:///eu-1a/i-0ab", # the Node's spec.providerID, "" when it has none
     "action": "START_SHUTDOWN",         # or START_DRAIN (an idle node whose drain completed)
     "tuple": ["idle", "open", "boot exceeded", "idle exceeded"],
                                         # worker state, billing window, boot grace, idle grace
     "reason": "...",                    # why, in words, for the receiver's log
     "idempotencyKey": "..."}            # equal across every retry of one shutdown attempt

``POWER_ON`` powers on a node this actuator powered off (it stayed registered, NotReady)::

    {"node": "worker-7",
     "uid": "5f0c...",
     "providerID": "aws:///eu-1a/i-0ab",
     "action": "POWER_ON",
     "reason": "...",                    # what waits for it, in words (how many pending pods)
     "idempotencyKey": "..."}            # equal across every retry and restart of one boot

and these headers:

``Content-Type: application/json``
``X-Joulie-Timestamp``: the time of this attempt, in whole seconds since the Unix epoch.
``X-Joulie-Signature``: ``sha256=`` followed by the lowercase hex HMAC-SHA256, keyed with the
    shared secret, of the ASCII timestamp, one ``.``, and the body bytes exactly as received.
    A receiver recomputes it over the raw body (before any JSON parsing), compares in constant
    time (:func:`verify_signature` does both), and rejects a timestamp too far from its own clock,
    so that a recorded request cannot be replayed later.
``Idempotency-Key``: the same value as ``idempotencyKey`` in the body.

Each attempt is signed afresh (a new timestamp); the body, and so the idempotency key, stays the
same. A receiver must treat a second request with a key it has seen as the first one: a request
that timed out here may well have arrived there. A power-on's key names the boot (the Node's
uid and when it went off), so a restarted manager asking for the same boot sends the same key;
a boot that failed or did not register is asked for later under a new one.

How the answer is read:

- ``200`` or ``204``: the node is off, or on (DONE).
- ``202``: the request was taken and the node will be powered off, or on (ACCEPTED). After a
  power-off's 202 the controller waits for the Node to go away or NotReady, and if it has not
  after its shutdown timeout, asks again as a new attempt (a new key: the first one evidently
  did not take). After a power-on's 200, 204 or 202 it waits for the Node to become Ready; one
  not Ready within ``LIFECYCLE_BOOT_GRACE`` is off again, and is asked for after
  ``LIFECYCLE_BACKOFF`` under a new key.
- ``408``, ``429``, ``5xx``, a refused connection or a timeout: tried again after an exponential
  backoff (``base_delay_s``, doubling, at most ``max_delay_s``), or after ``Retry-After`` (delta
  seconds or an HTTP date) when that is longer, also at most ``max_delay_s``; after
  ``max_attempts`` attempts the request has FAILED, carrying the last ``Retry-After`` (which the
  node's backoff honours).
- anything else (another 4xx, a redirect): FAILED at once, naming the status and the start of
  the answer's body. Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from joulie.kube.client import user_agent
from joulie.manager.lifecycle.actuator import (
    ActuatorResult,
    BootOffer,
    BuildArgs,
    Outcome,
    PowerOnRequest,
    Registration,
    ShutdownRequest,
)
from joulie.manager.lifecycle.facts import offers_by_shape, registered_off_nodes

if TYPE_CHECKING:
    from joulie.kube.projections import SlimNode
    from joulie.manager.lifecycle.settings import LifecycleSettings
    from joulie.settings import Problem

log = structlog.get_logger("joulie.manager")

TIMESTAMP_HEADER: Final = "X-Joulie-Timestamp"
SIGNATURE_HEADER: Final = "X-Joulie-Signature"
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
SIGNATURE_PREFIX: Final = "sha256="
POWER_ON: Final = "POWER_ON"
"""The ``action`` of a power-on (a power-off's is the matrix's, START_SHUTDOWN or START_DRAIN)."""

_RETRIED: Final = frozenset({408, 429})
_BODY_SHOWN: Final = 200
"""Characters of a refusal's body quoted in the message (enough for an error's first line)."""
_BODY_READ: Final = 4096
"""Bytes of an answer's body read at most (the quote needs the first few hundred)."""


def sign(secret: bytes, timestamp: int | str, body: bytes) -> str:
    """The ``X-Joulie-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret, f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def verify_signature(
    secret: bytes,
    timestamp: int | str,
    body: bytes,
    header: str,
    *,
    now: float | None = None,
    tolerance_s: float = 300.0,
) -> bool:
    """Whether ``header`` (the ``X-Joulie-Signature`` received) signs ``body`` at ``timestamp``
    (the ``X-Joulie-Timestamp`` received) with ``secret``, at a timestamp within ``tolerance_s``
    of ``now`` (epoch seconds; this machine's clock unless given), so that a recorded request
    replayed later is rejected."""
    stamp = str(timestamp).strip()
    if not stamp.isdigit() or not stamp.isascii() or len(stamp) > 12:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_s:
        return False
    expected = sign(secret, stamp, body).encode("ascii")
    return hmac.compare_digest(expected, header.strip().encode("utf-8", "replace"))


def request_body(request: ShutdownRequest) -> bytes:
    """The JSON body sent for ``request`` (the same bytes on every attempt)."""
    return _compact(
        {
            "node": request.node,
            "uid": request.uid,
            "providerID": request.provider_id,
            "action": request.action.value,
            "tuple": request.tuple.as_list(),
            "reason": request.reason,
            "idempotencyKey": request.idempotency_key,
        }
    )


def power_on_body(request: PowerOnRequest) -> bytes:
    """The JSON body sent to power ``request.node`` on (the same bytes on every attempt)."""
    return _compact(
        {
            "node": request.node,
            "uid": request.uid,
            "providerID": request.provider_id,
            "action": POWER_ON,
            "reason": request.reason,
            "idempotencyKey": request.idempotency_key,
        }
    )


def _compact(document: dict[str, object]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now``: delta seconds or an HTTP date (a past date is
    0); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT; a date without a zone is read as such
        return None
    return max(0.0, when.timestamp() - now)


class WebhookActuator:
    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: bytes,
        *,
        timeout_s: float = 10.0,
        max_attempts: int = 5,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``clock`` gives epoch seconds (the timestamp header, HTTP-date Retry-After);
        ``sleep`` waits between attempts. Raises ValueError for an unusable configuration."""
        # httpx loads with the first webhook actuator, not with the module: every manager
        # imports the actuator registry, and httpx costs about 6 MiB of RSS.
        import httpx

        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"webhook URL {url!r} is not an http:// or https:// URL")
        if not secret:
            raise ValueError("the webhook secret is empty: requests could not be authenticated")
        if timeout_s <= 0 or base_delay_s < 0 or max_delay_s < base_delay_s or max_attempts < 1:
            raise ValueError(
                "webhook retries need timeout_s > 0, max_attempts >= 1 and "
                f"0 <= base_delay_s <= max_delay_s (got timeout_s={timeout_s}, "
                f"max_attempts={max_attempts}, base_delay_s={base_delay_s}, "
                f"max_delay_s={max_delay_s})"
            )
        self._url = url
        self._timeout_s = timeout_s
        # Messages and logs name the endpoint without credentials or query parameters.
        self._where = str(parsed.copy_with(username=None, password=None, query=None))
        self._secret = secret
        self._max_attempts = max_attempts
        self._base_delay_s = base_delay_s
        self._max_delay_s = max_delay_s
        self._clock = clock
        self._sleep = sleep
        self._client = httpx.AsyncClient(
            timeout=timeout_s, follow_redirects=False, headers={"User-Agent": user_agent()}
        )

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        return await self._send(
            "shutdown", request.node, request_body(request), request.idempotency_key, "off"
        )

    async def bootable(self, nodes: Sequence[SlimNode], now: float) -> list[BootOffer]:
        """The nodes this actuator powered off: they stay registered, NotReady, marked off, so
        the Nodes themselves say what can be powered on and what is booting."""
        return offers_by_shape(*registered_off_nodes(nodes), now)

    async def power_on(self, request: PowerOnRequest) -> ActuatorResult:
        if not request.node:
            # A receiver is told which machine to power on; a group's "any N" means nothing to
            # it (and bootable() never offers one).
            message = (
                f"power-on webhook {self._where}: asked for {request.count} nodes of "
                f"{request.group}, but only a node named in the request can be powered on"
            )
            log.warning("power-on webhook failed", group=request.group, error=message)
            return ActuatorResult(Outcome.FAILED, message)
        return await self._send(
            "power-on", request.node, power_on_body(request), request.idempotency_key, "on"
        )

    async def _send(self, what: str, node: str, body: bytes, key: str, done: str) -> ActuatorResult:
        """POST ``body`` until an answer settles it (signed afresh each attempt, retried as the
        wire format says). ``what`` names the request and ``done`` the node's state after a 200
        or 204, in messages."""
        import httpx  # loaded by __init__ already; named here for the except clauses

        last_problem = ""
        retry_after: float | None = None  # what the last answer asked for, before the next try
        last_retry_after: float | None = None
        for attempt in range(1, self._max_attempts + 1):
            if attempt > 1:
                delay = min(self._base_delay_s * 2 ** (attempt - 2), self._max_delay_s)
                if retry_after is not None:
                    delay = max(delay, min(retry_after, self._max_delay_s))
                await self._sleep(delay)
            stamp = int(self._clock())
            headers = {
                "Content-Type": "application/json",
                TIMESTAMP_HEADER: str(stamp),
                SIGNATURE_HEADER: sign(self._secret, stamp, body),
                IDEMPOTENCY_HEADER: key,
            }
            retry_after = None
            try:
                # One deadline for the whole attempt: httpx's timeout is per read, and a
                # receiver dripping a byte at a time held a shutdown past 45 s with 3 s.
                async with asyncio.timeout(self._timeout_s):
                    answer = await self._post(body, headers)
            except (httpx.TransportError, TimeoutError) as exc:
                if isinstance(exc, TimeoutError) and not str(exc):
                    last_problem = f"no whole answer within {self._timeout_s:g} s"
                else:
                    last_problem = (
                        f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    )
                log.info(
                    f"{what} webhook unreachable", node=node, attempt=attempt, error=last_problem
                )
                continue
            except httpx.HTTPError as exc:
                return self._failed(what, node, f"the request could not be made: {exc}", None)
            status = answer.status
            if status in (200, 204):
                return ActuatorResult(
                    Outcome.DONE, f"{self._where} answered {status}: node {node} is {done}"
                )
            if status == 202:
                return ActuatorResult(
                    Outcome.ACCEPTED, f"{self._where} accepted the {what} of node {node}"
                )
            described = answer.describe()
            if status in _RETRIED or status >= 500:
                retry_after = retry_after_seconds(answer.retry_after, self._clock())
                if retry_after is not None:
                    last_retry_after = retry_after
                last_problem = described
                log.info(
                    f"{what} webhook asks to retry",
                    node=node,
                    attempt=attempt,
                    status=status,
                    retry_after_s=retry_after,
                )
                continue
            return self._failed(what, node, f"refused: {described}", None)
        return self._failed(
            what,
            node,
            f"gave up after {self._max_attempts} attempts; the last: {last_problem}",
            last_retry_after,
        )

    async def _post(self, body: bytes, headers: dict[str, str]) -> _Answer:
        """One attempt's answer: its status, Retry-After and the start of its body (the rest is
        never read: a receiver's 300 MiB answer took the manager from 62 to 962 MiB)."""
        async with self._client.stream(
            "POST", self._url, content=body, headers=headers
        ) as response:
            start = bytearray()
            async for chunk in response.aiter_bytes():
                start += chunk
                if len(start) >= _BODY_READ:
                    break
            return _Answer(
                response.status_code,
                response.reason_phrase,
                response.headers.get("Retry-After"),
                bytes(start[:_BODY_READ]),
            )

    def _failed(
        self, what: str, node: str, problem: str, retry_after: float | None
    ) -> ActuatorResult:
        message = f"{what} webhook {self._where} for node {node}: {problem}"
        log.warning(f"{what} webhook failed", node=node, error=message)
        return ActuatorResult(Outcome.FAILED, message, retry_after)

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class _Answer:
    status: int
    reason: str
    retry_after: str | None
    start: bytes
    """The first bytes of the body (at most _BODY_READ)."""

    def describe(self) -> str:
        text = " ".join(self.start.decode("utf-8", "replace").split())
        if len(text) > _BODY_SHOWN:
            text = text[:_BODY_SHOWN] + "..."
        status = f"{self.status} {self.reason}".strip()
        return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _build(args: BuildArgs) -> WebhookActuator:
    settings = args.settings
    if settings is None or not settings.lifecycle_webhook_url:
        raise ValueError("the webhook actuator needs a URL to POST shutdowns and power-ons to")
    secret = b""
    if settings.lifecycle_webhook_secret_file:
        secret = Path(settings.lifecycle_webhook_secret_file).read_bytes().strip()
    return WebhookActuator(
        settings.lifecycle_webhook_url, secret, timeout_s=settings.lifecycle_webhook_timeout
    )


def _problems(settings: LifecycleSettings) -> list[Problem]:
    problems = settings.url_problems(
        "lifecycle_webhook_url", "LIFECYCLE_ACTUATOR=webhook", template=False
    )
    path = settings.lifecycle_webhook_secret_file
    if not path:
        return [
            *problems,
            settings.problem(
                "lifecycle_webhook_secret_file",
                "is required with LIFECYCLE_ACTUATOR=webhook (requests are signed)",
                "the path of a file holding the signing key",
            ),
        ]
    try:
        with open(path, "rb") as secret:
            readable = bool(secret.read().strip())
    except OSError as exc:
        readable = False
        detail = f"cannot be read: {exc.strerror or exc}"
    else:
        detail = "holds no key"
    if not readable:
        problems.append(
            settings.problem(
                "lifecycle_webhook_secret_file",
                detail,
                "the path of a readable file holding the signing key",
            )
        )
    return problems


REGISTRATION = Registration(
    "webhook", "POST a signed request to LIFECYCLE_WEBHOOK_URL", _build, _problems
)
