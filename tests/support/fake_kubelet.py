"""A fake kubelet PodResources server: the real v1 protobuf over gRPC on a unix socket, answering
``List`` from pods a test sets, and misbehaving on demand (hanging, answering too much).

Socket paths are short on purpose: a unix socket path longer than 107 bytes cannot be bound, and
pytest's ``tmp_path`` gets close to that.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc

from joulie.agent.kubelet_podresources import api_pb2, api_pb2_grpc

__all__ = ["FakeKubelet", "NodePods", "fake_kubelet", "gpu_pod", "short_socket_dir"]


def gpu_pod(
    name: str,
    *device_ids: str,
    namespace: str = "work",
    resource: str = "nvidia.com/gpu",
    cpu_ids: Sequence[int] = (),
) -> api_pb2.PodResources:
    """A pod with one container holding ``device_ids`` of ``resource`` (and exclusive
    ``cpu_ids``), as the kubelet lists it."""
    devices = [api_pb2.ContainerDevices(resource_name=resource, device_ids=list(device_ids))]
    container = api_pb2.ContainerResources(name="c", devices=devices, cpu_ids=list(cpu_ids))
    return api_pb2.PodResources(name=name, namespace=namespace, containers=[container])


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """``List`` answers :attr:`pods`; :attr:`hang` makes it wait until released (or the
    server stops), :attr:`padding` adds that many bytes of junk pods to the answer, and
    :attr:`garbage` is sent instead of any answer (bytes that are no ListPodResourcesResponse)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: list[api_pb2.PodResources] = []
        self.hang = False
        self.padding = 0
        self.garbage: bytes | None = None
        self.calls = 0
        self.released = threading.Event()

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse | bytes:
        self.calls += 1
        if self.hang:
            self.released.wait(30)
        if self.garbage is not None:
            return self.garbage
        pods = list(self.pods)
        if self.padding:
            junk = api_pb2.ContainerResources(name="x" * self.padding)
            pods.append(api_pb2.PodResources(name="junk", namespace="junk", containers=[junk]))
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)


class NodePods:
    """The pods of one node as both the kubelet lists them (with their devices and exclusive
    CPUs) and the agent's pod cache classes them; :attr:`classes` ``.get`` is the cache's
    ``pod_class``."""

    def __init__(self, kubelet: FakeKubelet, namespace: str = "work") -> None:
        self.kubelet = kubelet
        self.namespace = namespace
        self.classes: dict[tuple[str, str], str] = {}

    def run(
        self, name: str, workload_class: str, *device_ids: str, cpu_ids: Sequence[int] = ()
    ) -> None:
        """A pod of ``workload_class`` holding ``device_ids`` and ``cpu_ids``; a pod of that
        name already there is replaced (deleted and created again)."""
        self.classes[self.namespace, name] = workload_class
        self.kubelet.pods = [p for p in self.kubelet.pods if p.name != name]
        self.kubelet.pods.append(
            gpu_pod(name, *device_ids, namespace=self.namespace, cpu_ids=cpu_ids)
        )

    def stop(self, name: str) -> None:
        self.classes.pop((self.namespace, name), None)
        self.kubelet.pods = [p for p in self.kubelet.pods if p.name != name]


def _serialized(answer: api_pb2.ListPodResourcesResponse | bytes) -> bytes:
    return answer if isinstance(answer, bytes) else answer.SerializeToString()


def _handlers(kubelet: FakeKubelet) -> grpc.GenericRpcHandler:
    """The service as the generated code registers it, but for an answer that may be raw
    bytes (:attr:`FakeKubelet.garbage`)."""
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name
    list_handler = grpc.unary_unary_rpc_method_handler(
        kubelet.List,
        request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
        response_serializer=_serialized,
    )
    return grpc.method_handlers_generic_handler(service, {"List": list_handler})


@contextmanager
def short_socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kl-") as path:
        yield Path(path)


@contextmanager
def fake_kubelet() -> Iterator[FakeKubelet]:
    """A :class:`FakeKubelet` serving on ``<short temp dir>/kubelet.sock`` until the block
    ends (a hanging call is released first, so the server stops at once)."""
    with short_socket_dir() as directory:
        socket = directory / "kubelet.sock"
        kubelet = FakeKubelet(socket)
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((_handlers(kubelet),))
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        try:
            yield kubelet
        finally:
            kubelet.released.set()
            server.stop(grace=None).wait(5)
