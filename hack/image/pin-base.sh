#!/usr/bin/env bash
# Pin the Dockerfile's default BASE to the current digest of its tag.
#
#   hack/image/pin-base.sh            python:<tag> as the Dockerfile names it, e.g. 3.11-slim
#   hack/image/pin-base.sh 3.11-slim  another tag of the official python image
#
# It asks Docker Hub (anonymous token, then a HEAD of the manifest) for the digest of the
# tag's multi-platform index, the one every platform's pull resolves through, and rewrites the
# `ARG BASE=python:<tag>@sha256:...` line. Then build (`docker build .`), and commit the
# Dockerfile: that is how the base's security updates reach the image. `make image` does not
# use this default: it builds its own Debian base and passes BASE.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

die() { printf 'hack/image/pin-base.sh: %s\n' "$*" >&2; exit 1; }

line="$(grep -m1 '^ARG BASE=python:' Dockerfile)" || die "no 'ARG BASE=python:...' line in the Dockerfile"
current="${line#ARG BASE=python:}"
tag="${1:-${current%%@*}}"
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "not an image tag: $tag"

token="$(curl -fsS --max-time 30 \
    "https://auth.docker.io/token?service=registry.docker.io&scope=repository:library/python:pull" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')" ||
    die "no token from auth.docker.io (is Docker Hub reachable?)"
headers="$(curl -fsS --max-time 30 --head \
    -H "Authorization: Bearer $token" \
    -H "Accept: application/vnd.oci.image.index.v1+json" \
    -H "Accept: application/vnd.docker.distribution.manifest.list.v2+json" \
    "https://registry-1.docker.io/v2/library/python/manifests/$tag")" ||
    die "no manifest for python:$tag on Docker Hub"
digest="$(printf '%s\n' "$headers" | tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: *//p' | head -n1)"
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "Docker Hub gave no digest for python:$tag"

sed -i "s|^ARG BASE=python:.*|ARG BASE=python:$tag@$digest|" Dockerfile
echo "Dockerfile: BASE=python:$tag@$digest"
