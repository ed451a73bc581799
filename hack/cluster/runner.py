"""A real local Kubernetes control plane with KWOK nodes, for tests, benchmarks and the demo.

It starts etcd, kube-apiserver (RBAC, the usual admission plugins, the Workload API), optionally
kube-controller-manager, kube-scheduler (with a configurable KubeSchedulerConfiguration) and the
KWOK controller, all on loopback with free ports and freshly generated certificates. Everything it
starts is recorded in ``state.json`` in its work directory, so another process can stop it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from hack.cluster.pki import Pki, create_pki
from hack.cluster.stages import FAKE_NODE_ANNOTATION, stages
from joulie.api import keys

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "joulie-system"

FEATURE_GATES = (
    "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true,"
    "PodGroupPreemptionPolicy=true"
)
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
ADMISSION_PLUGINS = ",".join(
    (
        "NamespaceLifecycle",
        "LimitRanger",
        "ServiceAccount",
        "DefaultTolerationSeconds",
        "DefaultStorageClass",
        "Priority",
        "PodSecurity",
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionWebhook",
        "ResourceQuota",
    )
)


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bin_dir() -> Path:
    """Where hack/build-binaries.sh puts the binaries for the pinned versions."""
    out = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def binaries_built() -> bool:
    check = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "--check"], capture_output=True
    )
    return check.returncode == 0


@dataclass
class Component:
    name: str
    argv: list[str]
    health: str
    tls: str  # "admin" (verify with our CA, admin client cert), "insecure" or "none"
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


@dataclass
class LocalCluster:
    work_dir: Path
    binaries: Path | None = None
    controller_manager: bool = True
    scheduler: bool = True
    kwok: bool = True
    scheduler_extenders: list[dict[str, Any]] = field(default_factory=list)
    # KWOK renews each node's Lease every quarter of its duration, and the node lifecycle
    # controller marks a node NotReady after node_grace_seconds without a renewal. Long leases
    # keep 5,000 nodes from costing hundreds of writes per second on two cores.
    node_lease_seconds: int = 120
    node_grace_seconds: int = 300
    log: Callable[[str], None] = print

    components: dict[str, Component] = field(default_factory=dict, init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)

    # --- paths ---------------------------------------------------------------------------

    @property
    def pki(self) -> Pki:
        return Pki.at(self.work_dir / "pki")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.work_dir / "kubeconfig"

    def role_kubeconfig(self, role: str) -> Path:
        """Kubeconfig carrying the token of the ServiceAccount ``joulie-<role>``."""
        return self.work_dir / f"kubeconfig-{role}"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every write by a Joulie ServiceAccount, one JSON line
        each (see :func:`_audit_policy`), so tests can tell who wrote what, and when."""
        return self.work_dir / "audit.log"

    def audit_entries(self) -> list[dict[str, Any]]:
        """The audit log's complete entries. The API server appends while tests read, so a
        last line without its newline is an entry still being written: left for the next read
        (reading it failed one CI run with ``Unterminated string``)."""
        text = self.audit_log.read_text()
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line]

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision; returns that revision."""
        with httpx.Client(base_url=self.etcd_url, timeout=30) as etcd:
            header = etcd.post("/v3/kv/range", json={"key": "Lw=="}).json()["header"]
            revision = int(header["revision"])
            etcd.post("/v3/kv/compaction", json={"revision": revision, "physical": True})
        return revision

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def _bin(self, name: str) -> str:
        assert self.binaries is not None
        path = self.binaries / name
        if not path.exists():
            raise ClusterError(f"{path} is missing: run hack/build-binaries.sh")
        return str(path)

    # --- lifecycle -----------------------------------------------------------------------

    def up(self, timeout: float = 180) -> None:
        started = time.monotonic()
        if self.binaries is None:
            self.binaries = bin_dir()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        # A work dir that already holds a cluster is restarted with its data (benchmarks keep
        # 100,000 pods between runs); its certificates must then stay the same.
        if not self.pki.ca_cert.exists():
            create_pki(self.work_dir / "pki")
        state = self.work_dir / "state.json"
        if state.exists():
            # etcd remembers its peer URL in its data: a restarted cluster keeps its ports.
            self.ports = dict(json.loads(state.read_text())["ports"])
        for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager", "kwok"):
            self.ports.setdefault(name, free_port())
        self._write_admin_kubeconfig()
        try:
            self._start(self._etcd(), timeout)
            self._start(self._apiserver(), timeout)
            self._bootstrap()
            if self.controller_manager:
                self._start(self._controller_manager(), timeout)
            if self.scheduler:
                self._start(self._scheduler(), timeout)
            if self.kwok:
                self._start(self._kwok(), timeout)
        except BaseException:
            self.down()
            raise
        self.log(f"cluster up in {time.monotonic() - started:.1f}s at {self.server}")

    def down(self) -> None:
        """Stop every component this cluster started (in reverse order)."""
        for comp in reversed(list(self.components.values())):
            self._stop(comp)
        self.components.clear()
        self._save_state()

    def stop_component(self, name: str) -> None:
        self._stop(self.components[name])
        self._save_state()

    def start_component(self, name: str, timeout: float = 120) -> None:
        """Start a stopped component again with the same arguments (and so the same port)."""
        comp = self.components[name]
        if comp.process is not None and comp.process.poll() is None:
            return
        self._start(comp, timeout)

    @classmethod
    def attach(cls, work_dir: Path) -> LocalCluster:
        """The cluster recorded in ``work_dir/state.json`` (to stop it from another process)."""
        state = json.loads((work_dir / "state.json").read_text())
        cluster = cls(work_dir=work_dir, binaries=Path(state["binaries"]))
        cluster.ports = state["ports"]
        for name, c in state["components"].items():
            cluster.components[name] = Component(
                name, c["argv"], c["health"], c["tls"], pid=c["pid"]
            )
        return cluster

    # --- processes -----------------------------------------------------------------------

    def _start(self, comp: Component, timeout: float) -> None:
        t0 = time.monotonic()
        log_path = self.work_dir / "logs" / f"{comp.name}.log"
        with log_path.open("ab") as out:
            comp.process = subprocess.Popen(
                comp.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        comp.pid = comp.process.pid
        self.components[comp.name] = comp
        self._save_state()
        self._wait_healthy(comp, timeout)
        self.log(f"  {comp.name} ready in {time.monotonic() - t0:.1f}s (pid {comp.pid})")

    def _stop(self, comp: Component, grace: float = 10) -> None:
        pid = comp.pid
        if pid is None or not is_running(pid, comp.argv[0]):
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _alive(pid, comp.process):
            time.sleep(0.05)
        if _alive(pid, comp.process):
            os.killpg(pid, signal.SIGKILL)
            while _alive(pid, comp.process):
                time.sleep(0.05)
        comp.pid = None

    def _wait_healthy(self, comp: Component, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        with self._http(comp.tls) as client:
            while time.monotonic() < deadline:
                if comp.process is not None and comp.process.poll() is not None:
                    raise ClusterError(
                        f"{comp.name} exited with {comp.process.returncode}:\n"
                        + self.log_tail(comp.name)
                    )
                try:
                    response = client.get(comp.health, timeout=5)
                    if response.status_code == 200:
                        return
                    last = f"HTTP {response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    last = str(exc)
                time.sleep(0.2)
        raise ClusterError(
            f"{comp.name} not healthy after {timeout:.0f}s ({last}):\n" + self.log_tail(comp.name)
        )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.work_dir / "logs" / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _save_state(self) -> None:
        state = {
            "binaries": str(self.binaries),
            "ports": self.ports,
            "server": self.server if "apiserver" in self.ports else None,
            "components": {
                c.name: {"pid": c.pid, "argv": c.argv, "health": c.health, "tls": c.tls}
                for c in self.components.values()
            },
        }
        if self.work_dir.exists():
            (self.work_dir / "state.json").write_text(json.dumps(state, indent=2))

    # --- component command lines -----------------------------------------------------------

    def _etcd(self) -> Component:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return Component(
            "etcd",
            [
                self._bin("etcd"),
                "--name=joulie",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=joulie={peer}",
                "--quota-backend-bytes=8589934592",
                # A throwaway test cluster: durability is not worth the fsync latency.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            f"{client}/health",
            "none",
        )

    def _apiserver(self) -> Component:
        pki = self.pki
        policy = self.work_dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(_audit_policy()))
        return Component(
            "apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # Nothing in this cluster reaches the API through the `kubernetes` Service, and
                # its endpoint reconciler refuses a loopback address.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.work_dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={ADMISSION_PLUGINS}",
                f"--feature-gates={FEATURE_GATES}",
                f"--runtime-config={RUNTIME_CONFIG}",
                "--allow-privileged=true",
                "--profiling=false",
                "--event-ttl=1h",
                # ConfigMaps bypass the watch cache, so a test can compact etcd past a watcher's
                # resourceVersion and see the 410 Gone an informer must recover from.
                "--watch-cache-sizes=configmaps#0",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-maxsize=200",
            ],
            f"{self.server}/readyz",
            "admin",
        )

    def _controller_manager(self) -> Component:
        port = self.ports["controller-manager"]
        return Component(
            "controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.work_dir / 'kcm-certs'}",
                "--leader-elect=false",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--use-service-account-credentials=false",
                f"--node-monitor-grace-period={self.node_grace_seconds}s",
                # A node KWOK has not reached yet must not be declared dead in the meantime.
                f"--node-startup-grace-period={self.node_grace_seconds}s",
                f"--feature-gates={FEATURE_GATES}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
            f"https://127.0.0.1:{port}/healthz",
            "insecure",
        )

    def scheduler_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {
                "kubeconfig": str(self.admin_kubeconfig),
                "qps": 500,
                "burst": 1000,
            },
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        if self.scheduler_extenders:
            config["extenders"] = self.scheduler_extenders
        return config

    def use_extender(
        self, url_prefix: str | None, timeout: float = 120, *, config: Path | None = None
    ) -> None:
        """Restart kube-scheduler calling the Joulie extender at ``url_prefix``, configured as
        the project's manifest ``config`` configures it (by default manifests/extender/
        kube-scheduler-config.example.yaml); None restarts it without extenders."""
        self.scheduler_extenders = (
            [] if url_prefix is None else manifest_extenders(url_prefix, config or EXTENDER_CONFIG)
        )
        self.stop_component("scheduler")
        self._write_scheduler_config()
        self.start_component("scheduler", timeout)

    def _write_scheduler_config(self) -> Path:
        path = self.work_dir / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(self.scheduler_config(), sort_keys=False))
        return path

    def _scheduler(self) -> Component:
        port = self.ports["scheduler"]
        path = self._write_scheduler_config()
        return Component(
            "scheduler",
            [
                self._bin("kube-scheduler"),
                f"--config={path}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.work_dir / 'scheduler-certs'}",
                f"--feature-gates={FEATURE_GATES}",
            ],
            f"https://127.0.0.1:{port}/healthz",
            "insecure",
        )

    def _kwok(self) -> Component:
        path = self.work_dir / "kwok-stages.yaml"
        path.write_text(yaml.safe_dump_all(stages(), sort_keys=False))
        port = self.ports["kwok"]
        return Component(
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={path}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector="
                f"{FAKE_NODE_ANNOTATION}={keys.KWOK_NODE_VALUE}",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                "--v=WARN",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{port}",
            ],
            f"http://127.0.0.1:{port}/healthz",
            "none",
        )

    # --- API access ----------------------------------------------------------------------

    def ca_tls(self) -> ssl.SSLContext:
        """TLS trusting our CA (for clients that bring their own credentials, e.g. a token)."""
        return ssl.create_default_context(cafile=str(self.pki.ca_cert))

    def admin_tls(self) -> ssl.SSLContext:
        """TLS trusting our CA and presenting the admin client certificate."""
        context = self.ca_tls()
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _http(self, tls: str) -> httpx.Client:
        if tls == "admin":
            return httpx.Client(verify=self.admin_tls())
        # The other components serve health on self-signed certificates of their own.
        return httpx.Client(verify=False)

    def api(self) -> httpx.Client:
        """An admin HTTP client for the API server (base URL set)."""
        return httpx.Client(base_url=self.server, verify=self.admin_tls(), timeout=30)

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self._bin("kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def admitted(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """``pod`` as admission leaves it: a dry run takes every admission step (mutating
        policies included) and stores nothing."""
        with self.api() as api:
            answer = api.post(
                f"/api/v1/namespaces/{namespace}/pods", params={"dryRun": "All"}, json=pod
            )
        if answer.status_code != 201:
            raise ClusterError(f"dry run of pod refused ({answer.status_code}): {answer.text}")
        body: dict[str, Any] = answer.json()
        return body

    @contextmanager
    def policy_in_force(
        self, directory: Path, namespace: str, probe: dict[str, Any], timeout: float = 60
    ) -> Iterator[None]:
        """The shipped admission policy of the kustomize ``directory`` (one of
        :data:`ADMISSION_POLICIES`) applied, and in force; deleted afterwards, and out of force.
        The API server takes a moment to load or drop a policy, so a dry run of the performance
        pod ``probe`` in ``namespace`` is repeated until it shows the policy (then until it no
        longer does: a pod marked for the performance-filter configuration after it is gone
        would wait for a resource no node offers). The probe's name is left to the API server
        (``generateName``), so the dry run cannot clash with a pod the caller creates meanwhile
        under the probe's name (bench.extender's first pod is its probe)."""
        changed = ADMISSION_POLICIES[directory]
        metadata = {k: v for k, v in probe.get("metadata", {}).items() if k != "name"}
        probe = {**probe, "metadata": {**metadata, "generateName": "policy-probe-"}}

        def until(in_force: bool) -> None:
            deadline = time.monotonic() + timeout
            while changed(self.admitted(namespace, probe)) != in_force:
                if time.monotonic() > deadline:
                    state = "in force" if in_force else "gone"
                    raise ClusterError(f"the admission policy of {directory} not {state}")
                time.sleep(0.5)

        self.kubectl("apply", "-k", str(directory))
        try:
            until(in_force=True)
            yield
        finally:
            self.kubectl("delete", "-k", str(directory), "--ignore-not-found")
            until(in_force=False)

    def _write_admin_kubeconfig(self) -> None:
        self.admin_kubeconfig.write_text(
            yaml.safe_dump(
                _kubeconfig(
                    self.server,
                    self.pki.ca_cert,
                    "joulie-admin",
                    {
                        "client-certificate": str(self.pki.admin_cert),
                        "client-key": str(self.pki.admin_key),
                    },
                )
            )
        )

    def _bootstrap(self) -> None:
        """Joulie's namespace, CRDs and RBAC, and a kubeconfig per role with its own token."""
        self.kubectl("apply", "-f", str(REPO / "manifests" / "base" / "namespace.yaml"))
        self.kubectl("apply", "-k", str(REPO / "manifests" / "crds"))
        self.kubectl("apply", "-k", str(REPO / "manifests" / "rbac"))
        self.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/nodetwins.joulie.io",
            "crd/nodehardwares.joulie.io",
        )
        with self.api() as api:
            listed = api.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts")
            listed.raise_for_status()
            for item in listed.json()["items"]:
                name = item["metadata"]["name"]
                if not name.startswith("joulie-"):
                    continue
                response = api.post(
                    f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
                    json={
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 86400},
                    },
                )
                response.raise_for_status()
                token = response.json()["status"]["token"]
                path = self.role_kubeconfig(name.removeprefix("joulie-"))
                path.write_text(
                    yaml.safe_dump(
                        _kubeconfig(self.server, self.pki.ca_cert, name, {"token": token})
                    )
                )
                path.chmod(0o600)

    # --- nodes ---------------------------------------------------------------------------

    def create_objects(
        self,
        path: str,
        objects: Sequence[dict[str, Any]],
        workers: int = 16,
        attempts: int = 8,
    ) -> None:
        """POST many objects to one collection URL in parallel; existing ones are kept, so an
        interrupted run can simply be repeated (409 AlreadyExists counts as created).

        Each worker thread has a connection of its own: one httpx client shared by many threads
        timed out in its pool and had sockets closed under other threads when creating 100,000
        pods on two cores. Transient failures (timeouts, dropped connections, 429 and 5xx) are
        retried with capped backoff; a POST that timed out after the server stored the object
        comes back as 409 on the retry."""
        local = threading.local()
        opened: list[httpx.Client] = []
        opened_lock = threading.Lock()

        def client() -> httpx.Client:
            api: httpx.Client | None = getattr(local, "api", None)
            if api is None:
                api = httpx.Client(base_url=self.server, verify=self.admin_tls(), timeout=60)
                local.api = api
                with opened_lock:
                    opened.append(api)
            return api

        def create(obj: dict[str, Any]) -> None:
            problem = ""
            for attempt in range(attempts):
                if attempt:
                    time.sleep(min(0.25 * 2**attempt, 10.0))
                try:
                    response = client().post(path, json=obj)
                except httpx.TransportError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    # The connection may be half-used or closed: start this thread afresh.
                    local.api.close()
                    local.api = None
                    continue
                if response.status_code in (201, 409):
                    return
                problem = f"HTTP {response.status_code} {response.text[:300]}"
                if response.status_code != 429 and response.status_code < 500:
                    break
            raise ClusterError(f"creating {obj['metadata']['name']} at {path}: {problem}")

        try:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(create, objects))
        finally:
            for api in opened:
                api.close()

    def create_nodes(self, nodes: Sequence[dict[str, Any]]) -> None:
        self.create_objects("/api/v1/nodes", nodes)

    def create_ready_nodes(self, nodes: Sequence[dict[str, Any]], timeout: float = 120) -> None:
        """Create KWOK nodes and wait until every one of them is Ready."""
        self.create_nodes(nodes)
        self.wait_nodes_ready([n["metadata"]["name"] for n in nodes], timeout=timeout)

    def wait_nodes_ready(self, names: Iterable[str], timeout: float = 300) -> None:
        wanted = set(names)
        deadline = time.monotonic() + timeout
        with self.api() as api:
            while True:
                ready = {
                    n["metadata"]["name"]
                    for n in _list_all(api, "/api/v1/nodes")
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", [])
                    )
                }
                missing = wanted - ready
                if not missing:
                    return
                if time.monotonic() > deadline:
                    example = sorted(missing)[:5]
                    raise ClusterError(f"{len(missing)} nodes not Ready, e.g. {example}")
                time.sleep(0.5)


_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests/extender"
EXTENDER_CONFIG = _MANIFESTS / "kube-scheduler-config.example.yaml"
"""The shipped configuration: filter, prioritize and preempt."""
PRIORITIZE_ONLY_CONFIG = _MANIFESTS / "kube-scheduler-config.prioritize-only.example.yaml"
"""The shipped configuration without the filter verb: for a policy that leaves no node eco or
draining, or with ``PLACEMENT_POLICY`` in force."""
PLACEMENT_POLICY = _MANIFESTS.parent / "placement"
"""The admission policy that gives performance pods a node affinity keeping them off eco nodes
(kustomize directory)."""
PERFORMANCE_FILTER_CONFIG = _MANIFESTS / "kube-scheduler-config.performance-filter.example.yaml"
"""The shipped configuration calling the filter for performance pods alone (two entries), with
``PERFORMANCE_FILTER_POLICY`` in force."""
PERFORMANCE_FILTER_POLICY = _MANIFESTS.parent / "performance-filter"
"""The admission policy that marks performance pods with the extended resource the filter entry
of ``PERFORMANCE_FILTER_CONFIG`` manages (kustomize directory)."""


def _has_affinity(pod: dict[str, Any]) -> bool:
    return "affinity" in pod["spec"]


def _requests_performance_pod(pod: dict[str, Any]) -> bool:
    requests = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
    return keys.PERFORMANCE_POD_RESOURCE in requests


ADMISSION_POLICIES: dict[Path, Callable[[dict[str, Any]], bool]] = {
    PLACEMENT_POLICY: _has_affinity,
    PERFORMANCE_FILTER_POLICY: _requests_performance_pod,
}
"""The shipped admission policies for performance pods, each with how a performance pod's dry
run shows it in force (others than the policy may change the pod: the ServiceAccount plugin
names its token volume at random)."""


def manifest_extenders(url_prefix: str, config: Path = EXTENDER_CONFIG) -> list[dict[str, Any]]:
    """The Joulie entries of a shipped KubeSchedulerConfiguration, each pointed at
    ``url_prefix`` (a local extender instead of the in-cluster Service)."""
    entries = yaml.safe_load(config.read_text())["extenders"]
    return [{**entry, "urlPrefix": url_prefix} for entry in entries]


def manifest_extender(url_prefix: str, config: Path = EXTENDER_CONFIG) -> dict[str, Any]:
    """The one Joulie entry of a shipped KubeSchedulerConfiguration that has one."""
    (extender,) = manifest_extenders(url_prefix, config)
    return extender


def _audit_policy() -> dict[str, Any]:
    """Metadata of the writes Joulie's own ServiceAccounts make, once each, when answered; the
    rest of the cluster's traffic (KWOK's node heartbeats, above all) is not recorded."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
        "rules": [
            {
                "level": "Metadata",
                "userGroups": [f"system:serviceaccounts:{NAMESPACE}"],
                "verbs": ["create", "update", "patch", "delete"],
            },
            {"level": "None"},
        ],
    }


def _list_all(api: httpx.Client, path: str, limit: int = 500) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        params = {"limit": str(limit)}
        if token:
            params["continue"] = token
        page = api.get(path, params=params)
        page.raise_for_status()
        body = page.json()
        items += body["items"]
        token = body["metadata"].get("continue", "")
        if not token:
            return items


def _kubeconfig(server: str, ca: Path, user: str, credentials: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "joulie-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "joulie-local", "user": user}}],
        "current-context": user,
    }


def _alive(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None:
        return process.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of a process we did not start cannot be reaped here; treat it as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def is_running(pid: int, binary: str) -> bool:
    """True when ``pid`` still runs ``binary`` (a recycled pid must never be killed)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    return cmdline == binary
