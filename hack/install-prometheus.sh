#!/usr/bin/env bash
# Make sure a `prometheus` binary is on PATH: the simulator's e2e tests scrape it with a real
# Prometheus, and under `make test` they fail without one (a silent skip would hide them).
# As root on Debian or Ubuntu, Debian's `prometheus` package is installed; anywhere else this
# says exactly what to run, since installing would need privileges we do not have.
set -euo pipefail

if command -v prometheus >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's prometheus package (the simulator's e2e tests need it)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    exit 0
fi
{
    echo "prometheus is not installed, and the simulator's e2e tests need it."
    if command -v apt-get >/dev/null; then
        echo "Install it with:  sudo apt-get install --no-install-recommends prometheus"
    else
        echo "Install Prometheus (https://prometheus.io/download/) and put its prometheus binary on PATH."
    fi
    echo "Then run make test again."
} >&2
exit 1
