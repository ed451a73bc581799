"""Powering off a node that KWOK fakes: deleting its Node object is all there is to it.

Only for fake nodes. A real Node deleted this way keeps running (and its kubelet registers it
again), so a node without KWOK's marker annotation is refused rather than "shut down".
"""

from __future__ import annotations

from typing import Any

import aiohttp
import structlog

from joulie.api.keys import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE, kwok_node
from joulie.kube.client import ApiError
from joulie.kube.writes import Writer
from joulie.manager.lifecycle.actuator import (
    ActuatorResult,
    BuildArgs,
    Outcome,
    Registration,
    ShutdownRequest,
)

log = structlog.get_logger("joulie.manager")


class KwokActuator:
    name = "kwok"

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        """Delete the Node. Raises :class:`joulie.kube.writes.NotPermitted` when this process
        may not write (it no longer leads): nothing was sent then."""
        node = request.node
        if not kwok_node(request.annotations):
            return ActuatorResult(
                Outcome.FAILED,
                f"node {node} is not faked by KWOK (it lacks the annotation "
                f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}): deleting a real Node does not "
                "power it off, and its kubelet would register it again",
            )
        path = f"/api/v1/nodes/{node}"
        kwargs: dict[str, Any] = {}
        if request.uid:
            # The decision was about this very Node: a namesake registered since is not deleted.
            kwargs["body"] = {"preconditions": {"uid": request.uid}}
        self._writer.forget(path)
        try:
            await self._writer.send("DELETE", path, **kwargs)
        except ApiError as exc:
            if exc.not_found:
                return ActuatorResult(Outcome.DONE, f"Node {node} was already gone")
            if exc.conflict and request.uid:
                # Only the uid precondition makes a DELETE conflict: the Node asked about is
                # gone, and the object of that name now is another one.
                return ActuatorResult(
                    Outcome.DONE,
                    f"Node {node} (uid {request.uid}) was already gone; the Node of that name "
                    "now is a new one and was left alone",
                )
            log.warning("deleting the node failed", node=node, status=exc.status, error=str(exc))
            return ActuatorResult(
                Outcome.FAILED, f"deleting Node {node} failed: HTTP {exc.status} {exc.message}"
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # Whether it was deleted is unknown; asking again is safe (a deletion is idempotent).
            log.warning("deleting the node got no answer", node=node, error=repr(exc))
            return ActuatorResult(
                Outcome.FAILED, f"deleting Node {node} got no answer: {type(exc).__name__}: {exc}"
            )
        return ActuatorResult(Outcome.DONE, f"Node {node} deleted (KWOK fakes it)")

    async def close(self) -> None:
        """Nothing to release: the writer belongs to the caller."""


def _build(args: BuildArgs) -> KwokActuator:
    return KwokActuator(args.writer)


REGISTRATION = Registration("kwok", "delete a KWOK node", _build)
