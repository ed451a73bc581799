#!/usr/bin/env bash
# Build the control-plane binaries used by Joulie's integration and scale tests
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok)
# and helm (which renders, lints and installs charts/joulie) from Go modules, into a cache outside the checkout:
#
#   ${JOULIE_K8S_CACHE:-$HOME/.cache/joulie/k8s}/<KUBERNETES_VERSION>/bin/
#
# Versions come from hack/versions.env; the exact dependency graph comes from
# the committed wrapper modules hack/{k8s,etcd,kwok,helm}/go.{mod,sum}. Only a Go
# toolchain and the Go module proxy are needed.
#
# Idempotent: a component whose binaries exist and whose stamp matches the
# current recipe is skipped, so a second run returns in well under a second.
# A cold build of everything takes tens of minutes on 2 cores.
#
# Usage: hack/build-binaries.sh [options] [k8s|etcd|kwok|helm ...]
#   (no component names = all four)
#   --force          rebuild even when up to date
#   --check          build nothing; exit 0 if up to date, 1 otherwise
#   --verify         afterwards run each binary's version command
#   --print-bin-dir  print the bin directory and exit
#   -h, --help       show this help
#
# Environment:
#   JOULIE_K8S_CACHE    cache root (default $HOME/.cache/joulie/k8s)
#   JOULIE_GOTOOLCHAIN  overrides GO_TOOLCHAIN from versions.env
#   GO                  go binary to use (default: go in PATH, else /usr/local/go/bin/go)
#   GOCACHE, GOMODCACHE, GOPROXY, GOMAXPROCS are honoured as usual.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "${HACK_DIR}/versions.env"

# Bump when the build recipe changes in a way that needs a rebuild
# (flags, tags, layout); it is part of every stamp.
RECIPE=1

CACHE_ROOT="${JOULIE_K8S_CACHE:-${HOME:?set HOME or JOULIE_K8S_CACHE}/.cache/joulie/k8s}"
VERSION_DIR="${CACHE_ROOT}/${KUBERNETES_VERSION}"
BIN_DIR="${VERSION_DIR}/bin"
STAMP_DIR="${VERSION_DIR}/stamps"
STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"

ALL_COMPONENTS=(etcd kwok helm k8s)   # cheap ones first: early feedback
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

binaries_of() {
    case "$1" in
        k8s) echo "${K8S_COMMANDS[@]}" ;;
        etcd) echo etcd ;;
        kwok) echo kwok ;;
        helm) echo helm ;;
    esac
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

force=0 check_only=0 verify=0
components=()
while (( $# > 0 )); do
    case "$1" in
        --force) force=1 ;;
        --check) check_only=1 ;;
        --verify) verify=1 ;;
        --print-bin-dir) echo "${BIN_DIR}"; exit 0 ;;
        -h|--help) usage; exit 0 ;;
        k8s|etcd|kwok|helm) components+=("$1") ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
(( ${#components[@]} > 0 )) || components=("${ALL_COMPONENTS[@]}")

START=${SECONDS}
log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fmt_secs() { printf '%dm%02ds' $(( $1 / 60 )) $(( $1 % 60 )); }

# --- consistency between versions.env and the committed wrapper modules -----
check_modules() {
    local bad=0
    grep -q "^require k8s.io/kubernetes ${KUBERNETES_VERSION}\$\|^[[:space:]]k8s.io/kubernetes ${KUBERNETES_VERSION}\( \|\$\)" \
        "${HACK_DIR}/k8s/go.mod" || { log "hack/k8s/go.mod does not pin k8s.io/kubernetes ${KUBERNETES_VERSION}"; bad=1; }
    if grep '=> k8s.io/' "${HACK_DIR}/k8s/go.mod" | grep -vq " ${STAGING_VERSION}\$"; then
        log "hack/k8s/go.mod replaces staging modules with versions other than ${STAGING_VERSION}"; bad=1
    fi
    grep -q "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}\( \|\$\)" "${HACK_DIR}/etcd/go.mod" \
        || { log "hack/etcd/go.mod does not pin go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"; bad=1; }
    grep -q "sigs.k8s.io/kwok ${KWOK_VERSION}\( \|\$\)" "${HACK_DIR}/kwok/go.mod" \
        || { log "hack/kwok/go.mod does not pin sigs.k8s.io/kwok ${KWOK_VERSION}"; bad=1; }
    grep -q "helm.sh/helm/v4 ${HELM_VERSION}\( \|\$\)" "${HACK_DIR}/helm/go.mod" \
        || { log "hack/helm/go.mod does not pin helm.sh/helm/v4 ${HELM_VERSION}"; bad=1; }
    if (( bad )); then
        log "hack/versions.env and the wrapper modules disagree; run hack/update-go-modules.sh and commit the result"
        exit 1
    fi
}
check_modules

# --- stamps ------------------------------------------------------------------
# Build settings per component (also hashed into the stamp).
k8s_tags="selinux,notest,grpcnotrace"   # what upstream's hack/lib/golang.sh uses for release builds
common_flags="CGO_ENABLED=0 -trimpath -ldflags=-s -w"

version_of() {
    case "$1" in
        k8s) echo "${KUBERNETES_VERSION}" ;;
        etcd) echo "${ETCD_VERSION}" ;;
        kwok) echo "${KWOK_VERSION}" ;;
        helm) echo "${HELM_VERSION}" ;;
    esac
}

fingerprint() {
    local c="$1"
    {
        echo "recipe=${RECIPE} component=${c} version=$(version_of "${c}")"
        echo "platform=$(uname -s)/$(uname -m) flags=${common_flags} k8s_tags=${k8s_tags}"
        cat "${HACK_DIR}/${c}/go.mod" "${HACK_DIR}/${c}/go.sum"
        [[ "${c}" != etcd ]] || cat "${HACK_DIR}/etcd/main.go"
    } | sha256sum | cut -d' ' -f1
}

up_to_date() {
    local c="$1" b
    [[ -f "${STAMP_DIR}/${c}" ]] || return 1
    [[ "$(head -n1 "${STAMP_DIR}/${c}")" == "fingerprint=$(fingerprint "${c}")" ]] || return 1
    for b in $(binaries_of "${c}"); do
        [[ -x "${BIN_DIR}/${b}" ]] || return 1
    done
}

todo=()
for c in "${components[@]}"; do
    if (( force )) || ! up_to_date "${c}"; then todo+=("${c}"); fi
done

# Run every binary's version command; fails if one does not run.
verify_binaries() {
    local c b out rc=0
    for c in "${components[@]}"; do
        for b in $(binaries_of "${c}"); do
            # Full output first: piping into head could SIGPIPE the binary.
            case "${b}" in
                kubectl) out="$("${BIN_DIR}/${b}" version --client 2>&1)" ;;
                helm) out="$("${BIN_DIR}/${b}" version --short 2>&1)" ;;
                *) out="$("${BIN_DIR}/${b}" --version 2>&1)" ;;
            esac || { log "verify: ${b} failed: ${out}"; rc=1; continue; }
            log "verify: ${b}: ${out%%$'\n'*}"
        done
    done
    return "${rc}"
}

if (( ${#todo[@]} == 0 )); then
    log "up to date: ${components[*]} in ${BIN_DIR} (kubernetes ${KUBERNETES_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}, helm ${HELM_VERSION}); nothing to do ($(( SECONDS - START ))s)"
    (( ! verify )) || verify_binaries
    exit 0
fi
if (( check_only )); then
    log "out of date or missing: ${todo[*]} (in ${BIN_DIR})"
    exit 1
fi

# --- toolchain and environment -----------------------------------------------
GO="${GO:-go}"
if ! command -v "${GO}" >/dev/null 2>&1; then
    if [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go; else
        log "error: no go toolchain found (install Go >= 1.26 or set GO=/path/to/go)"; exit 1
    fi
fi
export GOTOOLCHAIN="${JOULIE_GOTOOLCHAIN:-${GO_TOOLCHAIN:-auto}}"
# -mod=readonly: build exactly what the committed go.sum files pin.
# -buildvcs=false: the wrapper modules live in this git checkout; VCS stamping
# would describe Joulie's tree, not the upstream sources, and fails on odd repos.
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0

mkdir -p "${BIN_DIR}" "${STAMP_DIR}"

# One build at a time per version directory.
if command -v flock >/dev/null 2>&1; then
    exec 9>"${VERSION_DIR}/.lock"
    if ! flock -n 9; then
        log "another build holds ${VERSION_DIR}/.lock; waiting for it"
        flock 9
    fi
    # The other build may have done the work meanwhile.
    remaining=()
    for c in "${todo[@]}"; do
        if (( force )) || ! up_to_date "${c}"; then remaining+=("${c}"); fi
    done
    todo=("${remaining[@]+"${remaining[@]}"}")
    if (( ${#todo[@]} == 0 )); then
        log "up to date after waiting for the other build; nothing to do"
        exit 0
    fi
    # Holding the lock, so any build directory left here is from a killed run.
    rm -rf "${VERSION_DIR}"/.build.*
fi

TMP_DIR="$(mktemp -d "${VERSION_DIR}/.build.XXXXXX")"
trap 'rm -rf "${TMP_DIR}"' EXIT

go_version="$(cd "${HACK_DIR}/k8s" && "${GO}" env GOVERSION)"
log "building ${todo[*]} into ${BIN_DIR}"
log "go ${go_version} (GOTOOLCHAIN=${GOTOOLCHAIN}), GOCACHE=$("${GO}" env GOCACHE), GOMODCACHE=$("${GO}" env GOMODCACHE), $(nproc 2>/dev/null || echo '?') CPUs"

# Move freshly built binaries into BIN_DIR (rename within one filesystem, so
# a reader never sees a half-written file), then write the stamp.
install_binaries() {
    local c="$1" out="$2" b
    for b in $(binaries_of "${c}"); do
        [[ -x "${out}/${b}" ]] || { log "${c}: expected ${out}/${b} was not produced"; return 1; }
    done
    for b in $(binaries_of "${c}"); do
        mv -f "${out}/${b}" "${BIN_DIR}/${b}" || return 1
    done
    {
        echo "fingerprint=$(fingerprint "${c}")"
        echo "component=${c} version=$(version_of "${c}") go=${go_version} built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } > "${STAMP_DIR}/${c}.tmp" && mv -f "${STAMP_DIR}/${c}.tmp" "${STAMP_DIR}/${c}"
}

download_modules() {
    local c="$1" t0=${SECONDS}
    log "${c}: downloading modules (go mod download)"
    (cd "${HACK_DIR}/${c}" && "${GO}" mod download) || { log "${c}: go mod download failed"; return 1; }
    log "${c}: modules ready in $(fmt_secs $(( SECONDS - t0 )))"
}

build_k8s() {
    local out="${TMP_DIR}/k8s" date ldflags="" key val pkg
    local -a pkgs=()
    mkdir -p "${out}"
    download_modules k8s || return 1
    # The version variables upstream sets via hack/lib/version.sh; without them
    # the binaries report v0.0.0-master.
    date="$(cd "${HACK_DIR}/k8s" && "${GO}" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)"
    local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
    for key in gitVersion=${KUBERNETES_VERSION} gitMajor=1 gitMinor=${minor} buildDate=${date:-1970-01-01T00:00:00Z}; do
        for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
            ldflags+=" -X ${pkg}.${key}"
        done
    done
    for val in "${K8S_COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${val}"); done
    log "k8s: go build ${K8S_COMMANDS[*]} (one invocation; the longest step)"
    (cd "${HACK_DIR}/k8s" && "${GO}" build -trimpath -tags "${k8s_tags}" \
        -ldflags "-s -w${ldflags}" -o "${out}/" "${pkgs[@]}") || { log "k8s: go build failed"; return 1; }
    install_binaries k8s "${out}"
}

build_etcd() {
    local out="${TMP_DIR}/etcd"
    mkdir -p "${out}"
    download_modules etcd || return 1
    log "etcd: go build etcd (go.etcd.io/etcd/server/v3 ${ETCD_VERSION})"
    (cd "${HACK_DIR}/etcd" && "${GO}" build -trimpath -ldflags "-s -w" -o "${out}/etcd" .) \
        || { log "etcd: go build failed"; return 1; }
    install_binaries etcd "${out}"
}

build_kwok() {
    local out="${TMP_DIR}/kwok"
    mkdir -p "${out}"
    download_modules kwok || return 1
    log "kwok: go build kwok (sigs.k8s.io/kwok ${KWOK_VERSION})"
    (cd "${HACK_DIR}/kwok" && "${GO}" build -trimpath -ldflags "-s -w" -o "${out}/kwok" sigs.k8s.io/kwok/cmd/kwok) \
        || { log "kwok: go build failed"; return 1; }
    install_binaries kwok "${out}"
}

build_helm() {
    local out="${TMP_DIR}/helm" v=helm.sh/helm/v4/internal/version
    mkdir -p "${out}"
    download_modules helm || return 1
    # What upstream's Makefile sets for a tagged release (no "+unreleased" metadata).
    log "helm: go build helm (helm.sh/helm/v4 ${HELM_VERSION})"
    (cd "${HACK_DIR}/helm" && "${GO}" build -trimpath \
        -ldflags "-s -w -X ${v}.version=${HELM_VERSION} -X ${v}.metadata= -X ${v}.gitTreeState=clean" \
        -o "${out}/helm" helm.sh/helm/v4/cmd/helm) || { log "helm: go build failed"; return 1; }
    install_binaries helm "${out}"
}

failed=()
summary=()
for c in "${todo[@]}"; do
    t0=${SECONDS}
    if "build_${c}"; then
        # Kept beside the stamp for bench/cluster.py (a cold build is the figure to watch).
        echo "build_seconds=$(( SECONDS - t0 ))" >> "${STAMP_DIR}/${c}"
        summary+=("${c} $(fmt_secs $(( SECONDS - t0 )))")
        log "${c}: done in $(fmt_secs $(( SECONDS - t0 ))): $(binaries_of "${c}")"
    else
        failed+=("${c}")
        summary+=("${c} FAILED after $(fmt_secs $(( SECONDS - t0 )))")
    fi
done

log "summary: ${summary[*]/%/;}"
if (( ${#failed[@]} > 0 )); then
    log "FAILED: ${failed[*]} (total $(fmt_secs $(( SECONDS - START ))))"
    exit 1
fi
log "all done in $(fmt_secs $(( SECONDS - START ))); binaries in ${BIN_DIR}"
ls -l "${BIN_DIR}" >&2
(( ! verify )) || verify_binaries
