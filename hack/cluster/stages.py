"""The lifecycle KWOK plays for fake nodes and pods in the local cluster.

Nodes become Ready once created, and again whenever something marked them otherwise while KWOK
still manages them (KWOK keeps their Leases fresh, which is what the node lifecycle controller
watches; a node KWOK stops managing goes NotReady as a dead node would). Pods bound to a fake
node start Running; a pod carrying the annotation ``RUN_DURATION_ANNOTATION`` (a Go duration
such as ``30s``) then Succeeds after that long, and a pod being deleted goes away, as a kubelet
would let it.
"""

from __future__ import annotations

from typing import Any

from joulie.api import keys

RUN_DURATION_ANNOTATION = "joulie.io/run-duration"
FAKE_NODE_ANNOTATION = keys.KWOK_NODE_ANNOTATION

_NODE_READY = """\
conditions:
{{- $conditions := dict "Ready" "True" "MemoryPressure" "False" "DiskPressure" "False" }}
{{- $_ := set $conditions "PIDPressure" "False" }}
{{- $_ := set $conditions "NetworkUnavailable" "False" }}
{{- range $type, $status := $conditions }}
- type: {{ $type }}
  status: {{ $status | Quote }}
  reason: Kwok{{ $type }}
  message: simulated by kwok
  lastHeartbeatTime: {{ Now | Quote }}
  lastTransitionTime: {{ Now | Quote }}
{{- end }}
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
daemonEndpoints:
  kubeletEndpoint:
    Port: 10250
phase: Running
"""

_POD_RUNNING = """\
phase: Running
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
startTime: {{ Now | Quote }}
conditions:
{{- range $type := list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
- type: {{ $type }}
  status: "True"
  lastTransitionTime: {{ Now | Quote }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ Now | Quote }}
{{- end }}
"""

_POD_SUCCEEDED = """\
phase: Succeeded
conditions:
{{- range $type := list "PodScheduled" "Initialized" }}
- type: {{ $type }}
  status: "True"
  lastTransitionTime: {{ Now | Quote }}
{{- end }}
{{- range $type := list "ContainersReady" "Ready" }}
- type: {{ $type }}
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ Now | Quote }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      finishedAt: {{ Now | Quote }}
{{- end }}
"""


def _stage(
    name: str,
    kind: str,
    selector: list[dict[str, Any]],
    next_: dict[str, Any],
    delay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "next": next_,
    }
    if delay:
        spec["delay"] = delay
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _status_patch(template: str) -> dict[str, Any]:
    return {
        "patches": [
            {"subresource": "status", "root": "status", "type": "merge", "template": template}
        ]
    }


_ALIVE = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_READY_STATUS = '.status.conditions.[] | select(.type == "Ready") | .status'


def stages() -> list[dict[str, Any]]:
    return [
        _stage(
            "joulie-node-ready",
            "Node",
            [_ALIVE, {"key": _READY_STATUS, "operator": "DoesNotExist"}],
            _status_patch(_NODE_READY),
        ),
        _stage(
            "joulie-node-ready-again",
            "Node",
            [_ALIVE, {"key": _READY_STATUS, "operator": "In", "values": ["False", "Unknown"]}],
            _status_patch(_NODE_READY),
        ),
        _stage(
            "joulie-pod-running",
            "Pod",
            [
                _ALIVE,
                {"key": ".spec.nodeName", "operator": "Exists"},
                {"key": ".status.podIP", "operator": "DoesNotExist"},
            ],
            _status_patch(_POD_RUNNING),
        ),
        _stage(
            "joulie-pod-finish",
            "Pod",
            [
                _ALIVE,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {
                    "key": f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]',
                    "operator": "Exists",
                },
            ],
            _status_patch(_POD_SUCCEEDED),
            delay={
                "durationMilliseconds": 0,
                "durationFrom": {
                    "expressionFrom": f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]'
                },
            },
        ),
        _stage(
            "joulie-pod-delete",
            "Pod",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]
