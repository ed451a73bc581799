#!/usr/bin/env bash
# `make image`: build the Dockerfile's image with no container registry at all.
#
#   1. mmdebstrap makes a small Debian root filesystem (python3, venv, CA certificates) from
#      the Debian mirror, as a tarball cached under ~/.cache/joulie/image/;
#   2. buildah imports the tarball as the image localhost/joulie-base:<suite>-<key>;
#   3. buildah builds the Dockerfile with --build-arg BASE=<that image>;
#   4. the image is checked by running `joulie --version`, `joulie config --role manager` and
#      `joulie crds` in it and by finding no matplotlib there, and its size is printed.
#
# hack/image/README.md says why each step is done this way. Settings (environment):
#   IMAGE             the tag to build (default: joulie:<version in pyproject.toml>)
#   SUITE             the Debian suite of the base (default: this machine's, else bookworm)
#   MIRROR            the Debian mirror (default: http://deb.debian.org/debian)
#   SECURITY_MIRROR   the security mirror (default: http://deb.debian.org/debian-security)
#   REFRESH=1         make the base root filesystem again (e.g. for security updates)
#   BUILDAH_ISOLATION buildah's own variable (default here: chroot, see the README)
#   STORAGE_DRIVER=vfs  use a vfs store (/var/lib/containers/storage-vfs) where overlay cannot mount
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'hack/image/build.sh: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "run as root: mmdebstrap's root mode and buildah's system storage need it"

# --- tools ------------------------------------------------------------------------------------
missing=()
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v buildah >/dev/null || missing+=(buildah)
if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]} (Debian packages)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
        || die "apt-get install ${missing[*]} failed"
fi

# crun/runc cannot create containers in some sandboxes (no user namespaces, or a cgroup
# hierarchy they refuse); chroot isolation needs neither and shares the host's network, which
# pip needs to reach PyPI during the build. Set BUILDAH_ISOLATION=oci to use the runtime.
export BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"

# overlay is containers/storage's default and works as root here. Where the kernel refuses
# overlay mounts, STORAGE_DRIVER=vfs selects plain copies; vfs gets a store of its own, because
# one store cannot be opened with two drivers ("database graph driver mismatch").
storage_opts=()
if [[ "${STORAGE_DRIVER:-}" == vfs ]]; then
    storage_opts=(--storage-driver vfs --root /var/lib/containers/storage-vfs --runroot /run/containers/storage-vfs)
fi
buildah() { command buildah "${storage_opts[@]}" "$@"; }

# --- settings ---------------------------------------------------------------------------------
version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n1)"
[[ -n "$version" ]] || die "no version in pyproject.toml"
IMAGE="${IMAGE:-joulie:$version}"
[[ "$IMAGE" == */* ]] || IMAGE="localhost/$IMAGE"

if [[ -z "${SUITE:-}" ]]; then
    SUITE=bookworm
    if [[ -r /etc/os-release ]]; then
        # shellcheck disable=SC1091
        codename="$(. /etc/os-release && [[ "${ID:-}" == debian ]] && echo "${VERSION_CODENAME:-}")" || true
        [[ -n "${codename:-}" ]] && SUITE="$codename"
    fi
fi
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
ARCH="$(dpkg --print-architecture)"

sources=("deb $MIRROR $SUITE main")
case "$SUITE" in
    sid | unstable | experimental) ;; # no updates or security suites for these
    *) sources+=("deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main") ;;
esac

# python3 is the runtime; python3-venv (with the pip and setuptools wheels it brings) lets the
# build stage make /opt/joulie; ca-certificates lets pip, and joulie, verify TLS peers;
# libstdc++6 is what numpy's and grpcio's wheels link against and do not carry (Debian's slim
# images have it through apt, which the essential variant leaves out).
packages=python3,python3-venv,ca-certificates,libstdc++6
# "essential" is the smallest variant that is still a working Debian: no apt and no Priority:
# important/standard packages, nothing the image runs. Debian 12 needs merged /usr set up by
# the hook, or usrmerge (and with it all of perl, ~50 MB) is pulled in to do it.
mmdebstrap_args=(
    --variant=essential
    --architecture="$ARCH"
    --include="$packages"
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
)
if [[ -d /usr/share/mmdebstrap/hooks/merged-usr ]]; then
    case "$SUITE" in
        bookworm | 12) mmdebstrap_args+=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr) ;;
    esac
fi

# The cache key covers everything that shapes the root filesystem, so a changed package list
# or mirror makes a new tarball instead of silently reusing an old one.
key="$(printf '%s\n' "$SUITE" "$ARCH" "${sources[@]}" "${mmdebstrap_args[@]}" | sha256sum | cut -c1-12)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/joulie/image"
tarball="$cache/base-$SUITE-$ARCH-$key.tar"
BASE="localhost/joulie-base:$SUITE-$key"

# --- 1. the Debian root filesystem --------------------------------------------------------------
mkdir -p "$cache"
if [[ -s "$tarball" && "${REFRESH:-0}" != 1 ]]; then
    log "base root filesystem: reusing $tarball (REFRESH=1 makes it again)"
else
    log "base root filesystem: mmdebstrap $SUITE ($packages) -> $tarball"
    # Written under a temporary name so an interrupted run never leaves a truncated cache; its
    # chatter (the hooks' dpkg output) goes to a log that is shown only when it fails.
    if ! mmdebstrap --format=tar "${mmdebstrap_args[@]}" "$SUITE" "$tarball.tmp" "${sources[@]}" \
        >"$cache/mmdebstrap.log" 2>&1; then
        tail -n 40 "$cache/mmdebstrap.log" >&2
        rm -f "$tarball.tmp"
        die "mmdebstrap failed (whole log: $cache/mmdebstrap.log)"
    fi
    mv -f "$tarball.tmp" "$tarball"
fi
tar_sum="$(sha256sum "$tarball" | cut -d' ' -f1)"

# --- 2. the base image ------------------------------------------------------------------------
have_sum="$(buildah inspect --type image --format '{{index .ImageAnnotations "io.joulie.base.tar-sha256"}}' "$BASE" 2>/dev/null || true)"
if [[ "$have_sum" == "$tar_sum" ]]; then
    log "base image: reusing $BASE"
else
    log "base image: importing the tarball as $BASE"
    ctr="$(buildah from scratch)"
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    # buildah add unpacks a local tar archive at the destination.
    buildah add --quiet "$ctr" "$tarball" / >/dev/null
    # A tarball carries no image configuration: give it what a Debian base image has.
    buildah config \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 \
        --cmd /bin/bash \
        --annotation "io.joulie.base.tar-sha256=$tar_sum" \
        --label "io.joulie.base.suite=$SUITE" \
        "$ctr"
    buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
    trap - EXIT
fi

# --- 3. the Dockerfile --------------------------------------------------------------------------
# pip in the build stage downloads from PyPI. Where the network's TLS is intercepted, the host's
# CA bundle (which trusts the interceptor) is mounted over the base's for the build's RUN steps
# only: Debian's pip reads /etc/ssl/certs/ca-certificates.crt, and a bind mount is not committed,
# so the image keeps Debian's own bundle.
build_args=(--layers --isolation "$BUILDAH_ISOLATION" --build-arg "BASE=$BASE" -t "$IMAGE" -f Dockerfile)
host_ca=/etc/ssl/certs/ca-certificates.crt
[[ -s "$host_ca" ]] && build_args+=(--volume "$host_ca:$host_ca:ro")
log "building $IMAGE from Dockerfile (BASE=$BASE, isolation $BUILDAH_ISOLATION)"
buildah build "${build_args[@]}" .

# --- 4. checks ------------------------------------------------------------------------------------
user="$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")"
[[ "$user" == 65532:65532 ]] || die "the image runs as '$user', not the non-root 65532:65532"

ctr="$(buildah from --quiet "$IMAGE")"
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
out="$(mktemp -d)"
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
check() {
    local name="$1"
    shift
    # buildah run does not apply the entrypoint, so each check names `joulie` itself; it runs
    # as the image's user (65532), as in a pod.
    if ! buildah run --isolation "$BUILDAH_ISOLATION" "$ctr" -- "$@" >"$out/$name" 2>"$out/$name.err"; then
        cat "$out/$name" "$out/$name.err" >&2
        die "in-image check failed: $*"
    fi
    [[ -s "$out/$name" ]] || die "in-image check printed nothing: $*"
    log "in image: $* ($(wc -l <"$out/$name") lines)"
    head -n 3 "$out/$name" | sed 's/^/    /' >&2
}
check version joulie --version
check config joulie config --role manager
check crds joulie crds
grep -q '^kind: CustomResourceDefinition' "$out/crds" || die "joulie crds printed no CustomResourceDefinition"
uid="$(buildah run --isolation "$BUILDAH_ISOLATION" "$ctr" -- python3 -c 'import os; print(os.getuid())')"
[[ "$uid" == 65532 ]] || die "the checks ran as uid $uid, not 65532"
# The plots extra is for the simulator's charts on a workstation, not for the roles.
if buildah run --isolation "$BUILDAH_ISOLATION" "$ctr" -- \
    python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("matplotlib") is None)' \
    2>/dev/null; then
    die "matplotlib is in the image: the Dockerfile must install requirements-image.txt, no extras"
fi

size="$(buildah images --format '{{.Size}}' "$IMAGE" | head -n1)"
base_size="$(buildah images --format '{{.Size}}' "$BASE" | head -n1)"
log "built $IMAGE: $size (base $BASE: $base_size), runs as 65532:65532"
