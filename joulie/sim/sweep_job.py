"""A sweep as a Kubernetes Indexed Job: its run specs as the ``specs.json`` the pods read, a
ConfigMap that carries it, and the Job whose pod ``i`` runs spec ``i`` (``joulie simulate
run-index``). Plain dicts out, so this module needs no Kubernetes client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from joulie.sim.result_io import canonical_json
from joulie.sim.run_spec import RunSpec


class SweepError(ValueError):
    """A sweep file, grid or Job that cannot be made; the message names the key. Defined here,
    below ``sweep`` which builds on this module, and re-exported there."""


def specs_json(specs: Sequence[RunSpec]) -> str:
    """The specs as the canonical JSON list that ``run_index`` reads."""
    return canonical_json([s.model_dump(mode="json") for s in specs])


MAX_SPECS_BYTES = 16 * 1024**2
"""Largest specs.json read: a Job's comes from a ConfigMap (1 MiB at most); room for one made
by hand for local runs."""


def read_specs(path: str | Path) -> list[RunSpec]:
    """The specs of a ``specs.json`` written by ``specs_json``."""
    with open(path, "rb") as file:  # an OSError names the path (the CLI prints it so)
        raw = file.read(MAX_SPECS_BYTES + 1)
    if len(raw) > MAX_SPECS_BYTES:
        raise SweepError(f"{path}: larger than {MAX_SPECS_BYTES} bytes; not a sweep's specs.json")
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SweepError(f"{path}: not a specs.json: {exc}") from None
    if not isinstance(loaded, list):
        raise SweepError(f"{path}: expected a JSON list of run specs")
    specs = []
    for index, item in enumerate(loaded):
        try:
            specs.append(RunSpec.model_validate(item))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"]))
            raise SweepError(f"{path}: spec {index}: {where}: {first['msg']}") from None
    return specs


CONFIGMAP_LIMIT_BYTES = 1_000_000
"""A ConfigMap holds at most 1 MiB; the specs.json must fit with room for the metadata."""
RUN_AS = 65532
"""The image's non-root user and group (the Dockerfile's ``USER``)."""
INDEX_ENV = "JOB_COMPLETION_INDEX"
RUN_INDEX = "joulie simulate run-index --specs /config/specs.json --index"


def indexed_job(
    specs: Sequence[RunSpec],
    *,
    image: str,
    namespace: str,
    name: str,
    results_claim: str | None,
    parallelism: int | None = None,
) -> list[dict[str, Any]]:
    """A ConfigMap ``<name>-specs`` holding ``specs.json`` and an Indexed Job ``<name>`` whose
    pod ``i`` runs spec ``i`` and writes ``run-<i:05d>.json`` to the results volume.

    The index reaches the command as ``--index $(JOB_COMPLETION_INDEX)``: the variable is
    declared in the container from the pod's completion-index annotation, so Kubernetes expands
    it in the command whatever the Job controller adds itself. Results go to the
    PersistentVolumeClaim ``results_claim``; ``None`` puts them on an emptyDir, which vanishes
    with each pod and so is only good for trying the Job out.
    """
    if not specs:
        raise SweepError("an Indexed Job needs at least one spec")
    _check_name("--name", name, 63 - len("-specs"), _DNS_LABEL)
    _check_name("--namespace", namespace, 63, _DNS_LABEL)
    if results_claim is not None:
        _check_name("--results-claim", results_claim, 253, _DNS_SUBDOMAIN)
    if not image or any(c.isspace() or not c.isprintable() for c in image):
        raise SweepError(f"--image {image!r}: an image reference has no spaces")
    if parallelism is not None and parallelism < 1:
        raise SweepError(f"--parallelism {parallelism}: must be at least 1")
    data = specs_json(specs)
    if len(data.encode()) > CONFIGMAP_LIMIT_BYTES:
        raise SweepError(
            f"specs.json is {len(data.encode())} bytes, over a ConfigMap's "
            f"{CONFIGMAP_LIMIT_BYTES}: split the sweep into several Jobs"
        )
    labels = {"app.kubernetes.io/name": "joulie-simulate", "app.kubernetes.io/instance": name}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-specs", "namespace": namespace, "labels": labels},
        "data": {"specs.json": data},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(specs),
            "parallelism": min(len(specs), 16) if parallelism is None else parallelism,
            "backoffLimitPerIndex": 1,
            "template": {
                "metadata": {"labels": labels},
                "spec": _pod_spec(image, f"{name}-specs", results_claim),
            },
        },
    }
    return [config_map, job]


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_name(option: str, value: str, longest: int, pattern: re.Pattern[str]) -> None:
    """A name the API server would take, checked here so a printed manifest applies: lowercase
    letters, digits and '-' (and '.' in a subdomain), alphanumeric at both ends."""
    if len(value) > longest or not pattern.fullmatch(value):
        what = "a DNS label" if pattern is _DNS_LABEL else "a DNS subdomain"
        raise SweepError(
            f"{option} {value!r}: not a valid Kubernetes name ({what}: lowercase letters, "
            f"digits and '-', starting and ending with a letter or digit, at most "
            f"{longest} characters)"
        )


def _pod_spec(image: str, config_map: str, results_claim: str | None) -> dict[str, Any]:
    results: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": results_claim}}
        if results_claim
        else {"emptyDir": {}}
    )
    index_field = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    container = {
        "name": "simulate",
        "image": image,
        "command": [*RUN_INDEX.split(), f"$({INDEX_ENV})", "--output", "/results"],
        "env": [{"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": index_field}}}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "specs", "mountPath": "/config", "readOnly": True},
            {"name": "results", "mountPath": "/results"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,  # so the non-root user can write the claim's files
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "specs", "configMap": {"name": config_map}},
            {"name": "results", **results},
            {"name": "tmp", "emptyDir": {}},
        ],
    }


def manifests_yaml(objs: Sequence[Mapping[str, Any]]) -> str:
    """The objects as one multi-document YAML stream, ready for ``kubectl apply -f -``."""
    return yaml.dump_all(
        [dict(o) for o in objs], Dumper=_PlainDumper, sort_keys=False, explicit_start=True
    )


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` anchors for a value used twice (the Job's labels and its pods'): many
    readers of a manifest, and people, do not follow aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
