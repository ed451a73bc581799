"""The demo run: a local cluster of KWOK nodes with every Joulie role as its own process, the
embedded workload submitted at an accelerated time scale, a live view, and a closing summary.

Everything it starts is stopped on the way out, whether the run ends, fails or is interrupted:
the roles in reverse order with SIGTERM (each restores and hands back what it holds), then the
cluster. The roles run in sessions of their own, so a Ctrl-C reaches only this process, which
then does the stopping in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, TextIO

import httpx
from pydantic import Field

from hack.cluster.nodes import node_manifests
from hack.cluster.roles import (
    JOULIE,
    POOL_AGENT_ACCOUNT,
    RoleDied,
    RoleProcess,
    extender_settings,
    manager_settings,
    pool_agent_settings,
    simulator_settings,
    sum_samples,
)
from hack.cluster.runner import REPO, ClusterError, LocalCluster, free_port
from hack.demo.energy import Booked, Saving, booked, metric_totals, saving
from hack.demo.view import CLEAR, Frame, Outcome, Placements, frame_text, summary_text
from hack.demo.workload import DemoPod, workload
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.cli.status.command import StatusCaches, energy_accounts
from joulie.cli.status.energy import energy_report
from joulie.cli.status.report import workload_class
from joulie.kube.client import KubeClient
from joulie.kube.informer import Handlers
from joulie.kube.projections import SlimPod
from joulie.settings import Duration, EnvSettings

INVENTORY = REPO / "tests" / "data" / "inventories" / "02-cluster-nodes.yaml"
SELECTOR = f"{keys.MANAGED_LABEL}=true"
NAMESPACE = "joulie-demo"
MANAGER_NAMESPACE = "joulie-system"
CONFIGMAP = f"ConfigMap {MANAGER_NAMESPACE}/joulie-energy-accounts"
MANAGER_POLICY = {
    # The performance share follows demand: a fifth of the nodes at rest, and one performance
    # node for every performance pod running or waiting when there are more of those.
    "POLICY_TYPE": "queue_aware_v1",
    "QUEUE_HP_BASE_FRAC": "0.2",
    "QUEUE_PERF_PER_HP_NODE": "1",
    "QUEUE_HP_MIN": "2",
}


class DemoSettings(EnvSettings):
    role = "demo"

    demo_duration: Duration = 180.0
    """How long the workload runs (wall clock), e.g. 3m or 45s."""
    demo_time_scale: Annotated[float, Field(ge=1, le=3600)] = 60.0
    """Simulated seconds per wall-clock second (60: a minute of simulated time each second)."""
    demo_dir: str = ""
    """Where the demo cluster lives (empty: .cache/demo in the checkout); replaced each run."""
    demo_summary: str = ""
    """Also write the closing summary as JSON to this file (empty: no file)."""
    demo_view_interval: Duration = 1.0
    """How often the live view is redrawn (on a terminal; elsewhere every 10 times as long)."""


class Demo:
    def __init__(self, settings: DemoSettings, out: TextIO = sys.stdout) -> None:
        self.settings = settings
        self.out = out
        self.work_dir = Path(settings.demo_dir) if settings.demo_dir else REPO / ".cache" / "demo"
        self.logs = self.work_dir / "roles"
        self.cluster = LocalCluster(work_dir=self.work_dir, log=self._say)
        self.roles: list[RoleProcess] = []
        self.pods = workload()
        self.placements = Placements()
        self.simulator_url = ""
        self.manager: RoleProcess | None = None
        self.nodes = 0

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        """The cluster, the nodes, the roles and kube-scheduler calling the extender."""
        if (self.work_dir / "state.json").exists():
            LocalCluster.attach(self.work_dir).down()  # a run that was killed outright
        shutil.rmtree(self.work_dir, ignore_errors=True)
        self.cluster.up()
        manifests = node_manifests(load_inventory(INVENTORY))
        self.nodes = len(manifests)
        started = time.monotonic()
        self.cluster.create_ready_nodes(manifests, timeout=300)
        self._say(f"{self.nodes} KWOK nodes Ready in {time.monotonic() - started:.1f}s")
        with self.cluster.api() as api:
            api.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})
        self.logs.mkdir(parents=True, exist_ok=True)
        sim_port = free_port()
        self.simulator_url = f"http://127.0.0.1:{sim_port}"
        scale = self.settings.demo_time_scale
        sim = self._role(
            "simulator", simulator_settings(f"127.0.0.1:{sim_port}", SELECTOR, time_scale=scale)
        )
        self._wait(sim.ready, 60, "the simulator")
        self._role("agent", pool_agent_settings(SELECTOR, self.simulator_url), POOL_AGENT_ACCOUNT)
        self.manager = self._role(
            "manager",
            manager_settings(
                SELECTOR, self.simulator_url, namespace=MANAGER_NAMESPACE, policy=MANAGER_POLICY
            ),
        )
        self._wait(self.manager.ready, 90, "the manager to lead")
        ext_port = free_port()
        extender = self._role(
            "extender", extender_settings(f"127.0.0.1:{ext_port}", namespace=MANAGER_NAMESPACE)
        )
        self._wait(extender.ready, 60, "the extender's caches")
        self.cluster.use_extender(f"http://127.0.0.1:{ext_port}")
        self._say(
            "simulator, agent (pool), manager and extender running; "
            "kube-scheduler calls the extender"
        )

    def _role(self, role: str, settings: dict[str, str], account: str | None = None) -> RoleProcess:
        process = RoleProcess(
            self.cluster,
            role,
            self.logs / f"{role}.log",
            settings,
            account=account,
            own_session=True,
        )
        self.roles.append(process)
        return process

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what} (logs in {self.logs})")
            time.sleep(0.3)

    def stop(self) -> None:
        for role in reversed(self.roles):
            role.stop()
        self.roles.clear()
        self.cluster.down()

    # --- the run ---------------------------------------------------------------------------

    def simulator_figures(self) -> tuple[float, float]:
        """(IT power in W, energy used so far in J) from the simulator's metrics."""
        try:
            text = httpx.get(f"{self.simulator_url}/metrics", timeout=5).text
        except httpx.HTTPError:
            return 0.0, 0.0
        return (
            sum_samples(text, "joulie_sim_cluster_it_power_watts", {}),
            sum_samples(text, "joulie_sim_node_energy_joules_total", {}),
        )

    def manager_books(self) -> Saving | None:
        """What the manager has booked so far and the running saving, from its counters
        (None when they cannot be read)."""
        if self.manager is None:
            return None
        try:
            text = self.manager.metrics()
        except (httpx.HTTPError, RoleDied):
            return None
        return saving(energy_report(metric_totals(text)).accounts)

    async def play(self) -> Outcome:
        """Submit the workload over the run while drawing the live view; the summary."""
        async with await KubeClient.from_kubeconfig(str(self.cluster.admin_kubeconfig)) as client:
            caches = StatusCaches(client, MANAGER_NAMESPACE)
            caches.pods.add_handlers(
                Handlers(
                    on_add=lambda pod: self._placed(caches, None, pod),
                    on_update=lambda old, new: self._placed(caches, old, new),
                )
            )
            stopping = asyncio.Event()
            tasks = caches.start(stopping)
            try:
                await caches.wait_synced()
                return await self._drive(client, caches)
            finally:
                stopping.set()
                await asyncio.gather(*tasks, return_exceptions=True)

    def _placed(self, caches: StatusCaches, old: SlimPod | None, new: SlimPod) -> None:
        if new.namespace != NAMESPACE or not new.node_name or (old and old.node_name):
            return
        twin = caches.twins.get(new.node_name)
        klass = twin.schedulable_class if twin and twin.schedulable_class else "unknown"
        self.placements.add(new.name, workload_class(new) == "performance", klass)

    async def _drive(self, client: KubeClient, caches: StatusCaches) -> Outcome:
        duration = self.settings.demo_duration
        scale = self.settings.demo_time_scale
        tty = self.out.isatty()
        interval = self.settings.demo_view_interval * (1 if tty else 10)
        due: list[DemoPod] = list(self.pods)
        submitted = 0
        peak = 0
        started = time.monotonic()
        next_view = started
        power_samples: list[float] = []
        while True:
            elapsed = time.monotonic() - started
            while due and due[0].at * duration <= elapsed:
                pod = due.pop(0)
                await client.request(
                    "POST",
                    f"/api/v1/namespaces/{NAMESPACE}/pods",
                    body=pod.manifest(NAMESPACE, scale),
                )
                submitted += 1
            report = caches.report(time.time())
            peak = max(peak, report.summary.by_class.get("performance", 0))
            if time.monotonic() >= next_view or elapsed >= duration:
                power, energy = await asyncio.to_thread(self.simulator_figures)
                books = await asyncio.to_thread(self.manager_books)
                power_samples.append(power)
                frame = Frame(
                    elapsed_s=min(elapsed, duration),
                    duration_s=duration,
                    time_scale=scale,
                    submitted=submitted,
                    total_pods=len(self.pods),
                    it_power_w=power,
                    energy_j=energy,
                    cluster=report.summary,
                    placements=self.placements,
                    performance_nodes_peak=peak,
                    booked=books,
                )
                text = frame_text(frame)
                print((CLEAR + text) if tty else text + "\n", file=self.out, flush=True)
                next_view += interval
            if elapsed >= duration:
                break
            await asyncio.sleep(0.2)
        _, energy = await asyncio.to_thread(self.simulator_figures)
        deferred = await asyncio.to_thread(self._deferred)
        accounts, problem = await self._final_books(client)
        status_energy = await asyncio.to_thread(self._status_energy)
        return Outcome(
            duration_s=duration,
            simulated_s=duration * scale,
            energy_kwh=energy / 3.6e6,
            mean_it_power_kw=(sum(power_samples) / len(power_samples) / 1000)
            if power_samples
            else 0.0,
            pods_submitted=submitted,
            performance_placed=dict(self.placements.performance),
            standard_placed=dict(self.placements.standard),
            performance_on_kept_off_nodes=list(self.placements.wrong),
            performance_nodes_peak=peak,
            nodes=self.nodes,
            deferred_transitions=deferred,
            control_results=report.summary.control_results,
            booked=accounts,
            booked_problem=problem,
            status_energy=status_energy,
        )

    async def _final_books(self, client: KubeClient) -> tuple[Booked | None, str]:
        """The manager's energy accounts once the run is over, as `joulie status --energy`
        reads them: the manager is stopped first (SIGTERM: its leader writes the ConfigMap as its
        term ends, before it hands back the Lease), then the ConfigMap is read. Should that last
        write not have landed (it has a few seconds), the ConfigMap holds less than the counters
        read just before the stop: the summary then takes those, and says so."""
        if self.manager is None:
            return None, "no manager ran"
        try:
            counters = await asyncio.to_thread(self.manager.metrics)
        except (httpx.HTTPError, RoleDied):
            counters = ""
        code = await asyncio.to_thread(self.manager.stop)
        try:
            stored = await energy_accounts(client, MANAGER_NAMESPACE)
        except Exception as exc:  # the summary says why, rather than the run failing here
            return None, f"{exc} (manager exit status {code})"
        live = energy_report(metric_totals(counters)) if counters else None
        if live is not None and live.total_kwh > stored.total_kwh * (1 + 1e-9) + 1e-12:
            note = f"the manager's counters (its last write to {CONFIGMAP} did not land)"
            return booked(live, note), ""
        return booked(stored, f"{CONFIGMAP} (the manager's write as it stopped)"), ""

    def _status_energy(self) -> str:
        """What `joulie status --energy` prints against the demo cluster (as an operator would
        run it), or why it failed."""
        command = [JOULIE, "status", "--energy", "--kubeconfig", str(self.cluster.admin_kubeconfig)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "(joulie status --energy did not answer within 60s)"
        if done.returncode != 0:
            return f"(joulie status --energy failed, exit {done.returncode}: {done.stderr.strip()})"
        return done.stdout.rstrip()

    def _deferred(self) -> float:
        if self.manager is None:
            return 0.0
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            return self.manager.metric("joulie_policy_transitions_total", result="deferred")
        return 0.0


@contextlib.contextmanager
def running(demo: Demo) -> Iterator[Demo]:
    try:
        demo.start()
        yield demo
    finally:
        demo.stop()


def main(settings: DemoSettings, out: TextIO = sys.stdout) -> int:
    demo = Demo(settings, out)
    try:
        with running(demo):
            outcome = asyncio.run(demo.play())
    except KeyboardInterrupt:
        print("\ninterrupted: everything the demo started is stopped", file=out)
        return 130
    except (ClusterError, RoleDied, TimeoutError) as exc:
        # Everything started is stopped by now; say what went wrong in one place.
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print("\n" + summary_text(outcome), file=out, flush=True)
    if settings.demo_summary:
        Path(settings.demo_summary).write_text(json.dumps(asdict(outcome), indent=2) + "\n")
    return 0 if not outcome.performance_on_kept_off_nodes else 1
