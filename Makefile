# Developer entry points. README.md names the two that matter: `make test` and (later) `make demo`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install binaries prometheus lint typecheck pytest generate crds docs image clean \
	cluster-up cluster-down bench-cluster bench-informer bench-simulator bench-manager bench-twin bench-simulate bench-agent-pool bench-agent-daemon \
	bench-extender bench-lifecycle bench-hostile chart-lint

# Everything CI runs: install, static checks, the control-plane binaries, then every test
# (unit tests, and the kube tests against a real API server, scheduler and KWOK).
test: install lint typecheck binaries chart-lint prometheus pytest

# Under `make test` the tests that need Prometheus fail when it is missing instead of skipping.
test: PYTEST_ENV := JOULIE_REQUIRE_PROMETHEUS=1

# The main job: a local cluster of 41 KWOK nodes with every Joulie role, a workload at 60x
# simulated time, a live view and a summary (DEMO_DURATION, default 3m; see hack/demo/run.py).
demo: install binaries
	$(BIN)/python -m hack.demo

install: $(STAMP)

# PYTHONWARNINGS: setuptools announces every editable install with an "Editable installation"
# banner (a warning that is information only, in every editable mode: strict prints it too and
# compat adds a deprecation of its own); the filter drops that one message and nothing else.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e '.[dev,plots]'
	touch $(STAMP)

# kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd and kwok, built from
# Go modules into ~/.cache/joulie/k8s (about 11 minutes on 2 cores the first time, then seconds).
binaries:
	hack/build-binaries.sh

# charts/joulie: `helm lint --strict` and `helm template` with the default values, the KWOK values
# and every option on (helm is built by `make binaries`; tests/kube/test_helm_chart.py holds the
# chart and manifests/ equal, tests/e2e/test_helm_install.py installs it).
HELM = $(shell hack/build-binaries.sh --print-bin-dir)/helm
CHART_ALL_ON := agentPool.enabled=true,simulator.enabled=true,manager.lifecycleRBAC.kwok=true,manager.lifecycleRBAC.clusterApi=true,monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,namespace.create=true,scheduler.enabled=true,scheduler.podDisruptionBudget.enabled=true,grafanaDashboard.enabled=true,performancePlacement.enabled=true,performanceFilter.enabled=true
chart-lint: binaries
	$(HELM) lint --strict charts/joulie
	$(HELM) lint --strict charts/joulie --values charts/joulie/ci/kwok-values.yaml
	$(HELM) lint --strict charts/joulie --set $(CHART_ALL_ON)
	$(HELM) template joulie charts/joulie --namespace joulie-system --include-crds > /dev/null
	$(HELM) template joulie charts/joulie --namespace joulie-system --values charts/joulie/ci/kwok-values.yaml > /dev/null
	$(HELM) template joulie charts/joulie --namespace joulie-system --set $(CHART_ALL_ON) > /dev/null

# The simulator's e2e tests scrape it with a real Prometheus: Debian's package, installed when
# missing (as root), otherwise the script says how to install it.
prometheus:
	hack/install-prometheus.sh

lint: install
	$(BIN)/ruff check joulie tests hack bench
	$(BIN)/ruff format --check joulie tests hack bench
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy joulie hack bench tests

pytest: install
	$(PYTEST_ENV) $(BIN)/pytest -q

# A local cluster for people: 41 KWOK nodes of the exp02 inventory (JOULIE_CLUSTER_DIR).
cluster-up: install binaries
	$(BIN)/python -m hack.cluster up --inventory tests/data/inventories/02-cluster-nodes.yaml

cluster-down: install
	$(BIN)/python -m hack.cluster down

# Figures: warm start, node registration at 1,000 and 5,000 nodes, API server and etcd memory.
bench-cluster: install binaries
	$(BIN)/python -m bench.cluster

# Informer sync of 5,000 nodes + 100,000 pods against model deserialisation, memory, watch rate.
# The first run creates the objects (about 8 minutes) in ~/.cache/joulie/bench-informer.
bench-informer: install binaries
	$(BIN)/python -m bench.informer

# Manager reconcile time and API writes at 5,000 nodes / 100,000 pods (bench-informer cluster).
bench-manager: install binaries
	$(BIN)/python -m bench.manager

# The twin's CPU cost per reconcile at 5,000 nodes (no cluster needed).
# One node-lifecycle pass over the benchmark cluster's 5,000 nodes and 100,000 pods (dry-run).
bench-lifecycle: install binaries
	$(BIN)/python -m bench.lifecycle

bench-twin: install
	$(BIN)/python -m bench.twin

# The standalone simulator: exp02 at 5,000 nodes, 60 h, per baseline; run time against nodes.
bench-simulate: install
	$(BIN)/python -m bench.simulate

# Agent pool mode at 5,000 nodes on 2 shards: first and steady pass, CPU per pass, RSS.
bench-agent-pool: install binaries
	$(BIN)/python -m bench.agent_pool

# Agent DaemonSet mode on a fake node: CPU per pass, share of a core at 20 s, RSS.
bench-agent-daemon: install binaries
	$(BIN)/python -m bench.agent_daemon

# Simulator telemetry latency and requests/s on one core, on the bench-informer cluster.
bench-simulator: install binaries
	$(BIN)/python -m bench.simulator

# Extender filter/prioritize latency and requests/s on one core at 5,000 nodes, and kube-scheduler's
# pods/s with and without it (bench-informer cluster; the manager runs alongside, about 15 minutes).
bench-extender: install binaries
	$(BIN)/python -m bench.extender

bench-hostile: install binaries
	$(BIN)/python -m bench.hostile

# Regenerate what is derived from the code (CI fails when the committed copies are stale).
generate: crds docs

crds: install
	$(BIN)/joulie crds --dir manifests/crds
	$(BIN)/joulie crds --dir charts/joulie/crds

docs: install
	$(BIN)/python -m joulie.cli.docs docs/configuration.md

# The container image without a registry: a Debian base made by mmdebstrap, built and checked
# with buildah (hack/image/README.md). With a registry, `docker build .` builds the same Dockerfile.
image:
	hack/image/build.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
