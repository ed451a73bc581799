"""The kubelet's PodResources API as the DaemonSet agent's :class:`~joulie.agent.pod_devices.
PodDevices`: which GPU device IDs and exclusive CPUs each pod on this node was given.

One ``v1.PodResourcesLister/List`` call per pass that needs it, over the kubelet's unix socket
(``List`` rather than ``Get``: it exists on every kubelet the agent supports). The call is
blocking gRPC run in a worker thread, so a kubelet that does not answer never holds the event
loop, and everything about it is bounded: a deadline on the call (and a slightly longer one on
the thread), a largest message the channel accepts, a most device IDs an answer may hold. A fresh
channel per call: the kubelet recreates its socket when it restarts, and a channel kept across
that would sit in reconnect backoff. Every failure becomes a
:class:`~joulie.agent.pod_devices.PodDevicesUnavailable` whose text depends only on the cause,
never on the reply (it reaches controlStatus, and a changing text would be a write per pass).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import structlog

from joulie.agent.pod_devices import (
    MAX_CPU_IDS,
    MAX_DEVICE_IDS,
    PodAllocations,
    PodDevicesUnavailable,
    PodKey,
    is_gpu_resource,
)

__all__ = [
    "CALL_TIMEOUT_S",
    "MAX_MESSAGE_BYTES",
    "PodResourcesClient",
    "allocations_of",
]

if TYPE_CHECKING:
    import grpc

    from joulie.agent.kubelet_podresources import api_pb2

log = structlog.get_logger("joulie.agent.pod_resources")

CALL_TIMEOUT_S = 5.0
"""Deadline of one List call; the kubelet answers from memory, in milliseconds."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest answer accepted: a node's few hundred pods with every container's devices, CPUs and
memory come to tens of KiB."""
_THREAD_GRACE_S = 1.0
"""How much longer than the call's deadline the loop waits for the worker thread."""


class PodResourcesClient:
    """:class:`~joulie.agent.pod_devices.PodDevices` from the kubelet's socket at ``socket``."""

    def __init__(
        self,
        socket: str,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes

    async def allocations(self) -> PodAllocations:
        try:
            response = await asyncio.wait_for(
                asyncio.to_thread(self._list), self.timeout_s + _THREAD_GRACE_S
            )
        except TimeoutError:
            raise PodDevicesUnavailable(self._late()) from None
        return allocations_of(response)

    def _list(self) -> api_pb2.ListPodResourcesResponse:
        # gRPC and protobuf (about 20 MiB of RSS) load at the first call: only a node whose
        # spec has per-class caps asks the kubelet anything.
        import grpc

        from joulie.agent.kubelet_podresources import api_pb2, api_pb2_grpc

        if not os.path.exists(self.socket):
            raise PodDevicesUnavailable(
                f"no kubelet PodResources socket at {self.socket} (is its directory mounted?)"
            )
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            # A proxy from the environment must never see a unix-socket call.
            ("grpc.enable_http_proxy", 0),
        ]
        try:
            with grpc.insecure_channel(f"unix://{self.socket}", options=options) as channel:
                # The generated service module is not annotated; the messages are.
                stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
                response: api_pb2.ListPodResourcesResponse = stub.List(
                    api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s
                )
                return response
        except grpc.RpcError as exc:
            raise PodDevicesUnavailable(self._failed(exc)) from None

    def _late(self) -> str:
        return f"the kubelet's PodResources API did not answer within {self.timeout_s:g} s"

    def _failed(self, exc: grpc.RpcError) -> str:
        import grpc

        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = exc.details() if isinstance(exc, grpc.Call) else None
        # The full text goes to the log; what is returned depends on the cause alone (gRPC's
        # details carry sizes and addresses that differ from one call to the next).
        log.debug("pod_resources.failed", code=getattr(code, "name", None), details=details)
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return self._late()
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return (
                "the kubelet's PodResources answer is larger than "
                f"{self.max_message_bytes} bytes; not read"
            )
        if code is grpc.StatusCode.UNAVAILABLE:
            return f"the kubelet's PodResources socket at {self.socket} does not answer"
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return "the kubelet does not serve PodResources v1 List"
        name = code.name if code is not None else type(exc).__name__
        return f"the kubelet's PodResources List failed ({name})"


def allocations_of(response: api_pb2.ListPodResourcesResponse) -> PodAllocations:
    """The GPU device IDs and the exclusive CPUs of each pod in a List answer, every
    container's together; pods that hold none are left out. Raises
    :class:`PodDevicesUnavailable` past :data:`MAX_DEVICE_IDS` GPU IDs or
    :data:`MAX_CPU_IDS` CPUs."""
    gpus: dict[PodKey, list[str]] = {}
    cpus: dict[PodKey, list[int]] = {}
    devices = cores = 0
    for pod in response.pod_resources:
        key = (pod.namespace, pod.name)
        for container in pod.containers:
            cores += len(container.cpu_ids)
            if cores > MAX_CPU_IDS:
                raise PodDevicesUnavailable(
                    f"the kubelet's answer holds more than {MAX_CPU_IDS} exclusive CPUs"
                )
            if container.cpu_ids:
                cpus.setdefault(key, []).extend(container.cpu_ids)
            for group in container.devices:
                if not is_gpu_resource(group.resource_name):
                    continue
                devices += len(group.device_ids)
                if devices > MAX_DEVICE_IDS:
                    raise PodDevicesUnavailable(
                        f"the kubelet's answer holds more than {MAX_DEVICE_IDS} GPU device IDs"
                    )
                gpus.setdefault(key, []).extend(group.device_ids)
    return PodAllocations(
        gpus={pod: tuple(ids) for pod, ids in gpus.items()},
        cpus={pod: tuple(ids) for pod, ids in cpus.items()},
    )
