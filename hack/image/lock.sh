#!/usr/bin/env bash
# Regenerate requirements-image.txt, the image's locked dependency set: every package the
# role image installs (pyproject.toml's dependencies, no extras, plus the build requirements
# that build joulie's own wheel in the image), each at one exact version with the sha256 of
# every file PyPI has for that version. The Dockerfile installs it with --require-hashes.
#
#   hack/image/lock.sh                          keep the current pins, add or drop what
#                                               pyproject.toml now asks for
#   hack/image/lock.sh --upgrade                every package to its newest allowed version
#   hack/image/lock.sh --upgrade-package numpy  one package
#
# pip-compile (pip-tools, at the version below) runs from a venv of its own under
# ~/.cache/joulie, made with PYTHON (default python3), which must be the image's Python minor
# version (the Dockerfile's BASE): the resolution follows the interpreter's markers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

die() { printf 'hack/image/lock.sh: %s\n' "$*" >&2; exit 1; }

PIP_TOOLS_VERSION=7.6.2
PYTHON="${PYTHON:-python3}"

want="$(sed -n 's/^ARG BASE=python:\([0-9]*\.[0-9]*\)-.*/\1/p' Dockerfile | head -n1)"
[[ -n "$want" ]] || die "no 'ARG BASE=python:X.Y-...' line in the Dockerfile"
have="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    || die "cannot run $PYTHON"
[[ "$have" == "$want" ]] || die "$PYTHON is Python $have; the image's is $want (set PYTHON=python$want)"

tools="${XDG_CACHE_HOME:-$HOME/.cache}/joulie/pip-tools-$PIP_TOOLS_VERSION-py$have"
if [[ ! -x "$tools/bin/pip-compile" ]]; then
    "$PYTHON" -m venv "$tools"
    "$tools/bin/pip" install --quiet "pip-tools==$PIP_TOOLS_VERSION"
fi

# A local wheel directory in the environment (PIP_FIND_LINKS) would end up in the lock, and
# its files' hashes with it; the lock names PyPI's files only.
unset PIP_FIND_LINKS
CUSTOM_COMPILE_COMMAND="hack/image/lock.sh" "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --all-build-deps --no-emit-find-links --no-emit-index-url \
    --output-file requirements-image.txt "$@" pyproject.toml
echo "requirements-image.txt: $(grep -c '^[A-Za-z0-9].*==' requirements-image.txt) packages"
