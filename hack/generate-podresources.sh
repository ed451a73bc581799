#!/usr/bin/env bash
# Regenerate the Python bindings of the kubelet's PodResources v1 gRPC API under
# joulie/agent/kubelet_podresources/ (api_pb2.py, api_pb2.pyi, api_pb2_grpc.py). The generated
# files are committed: the agent needs only protobuf and grpcio at run time, never protoc.
#
# Source: pkg/apis/podresources/v1/api.proto of the Go module k8s.io/kubelet (Apache-2.0), at
# the staging tag matching KUBERNETES_VERSION in hack/versions.env (v1.37.2 -> v0.37.2). Tags
# before v0.34 import gogo.proto and do not compile without it; the wire format is the same on
# every version, so bindings from a newer file talk to older kubelets too.
#
# Needs the Go module proxy (go mod download) and grpcio-tools in the venv (the dev extra).
# Usage: hack/generate-podresources.sh
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "${HACK_DIR}/versions.env"
KUBELET_VERSION="v0.${KUBERNETES_VERSION#v1.}"
PYTHON="${PYTHON:-${REPO}/.venv/bin/python}"
GO="${GO:-go}"
if ! command -v "${GO}" >/dev/null 2>&1; then
    if [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go; else
        echo "error: go not found in PATH" >&2; exit 1
    fi
fi
PACKAGE=joulie/agent/kubelet_podresources

scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
module_dir="$(cd "${scratch}" && "${GO}" mod init scratch >/dev/null 2>&1 \
    && "${GO}" mod download -json "k8s.io/kubelet@${KUBELET_VERSION}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
proto="${module_dir}/pkg/apis/podresources/v1/api.proto"
[[ -f "${proto}" ]] || { echo "error: ${proto} not found" >&2; exit 1; }

# The proto is compiled from a copy at the package's own path, so that the generated _grpc
# module imports its messages as joulie.agent.kubelet_podresources.api_pb2 (protoc writes a
# top-level "import api_pb2" otherwise) and the descriptor's file name cannot clash with
# another "api.proto" in the same process. The proto package (v1) and so the method paths
# (/v1.PodResourcesLister/List) stay the kubelet's.
mkdir -p "${scratch}/src/${PACKAGE}" "${scratch}/out"
cp "${proto}" "${scratch}/src/${PACKAGE}/api.proto"
"${PYTHON}" -m grpc_tools.protoc -I "${scratch}/src" \
    --python_out="${scratch}/out" --pyi_out="${scratch}/out" --grpc_python_out="${scratch}/out" \
    "${scratch}/src/${PACKAGE}/api.proto"
for name in api_pb2.py api_pb2.pyi api_pb2_grpc.py; do
    cp "${scratch}/out/${PACKAGE}/${name}" "${REPO}/${PACKAGE}/${name}"
done
echo "generated ${PACKAGE} from k8s.io/kubelet@${KUBELET_VERSION}" >&2
