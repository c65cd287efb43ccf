#!/usr/bin/env bash
# Provide the Kubernetes binaries gantry's integration tests, demo and benchmarks run against:
# etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kubectl of Kubernetes
# KUBE_VERSION, with etcd ETCD_VERSION.
#
# Both are built from their Go modules, through the Go module proxy (no release tarball is
# downloaded): a small module requires k8s.io/kubernetes and replaces each of its staging
# modules (the `k8s.io/X => ./staging/src/k8s.io/X` lines of its go.mod) by the published
# k8s.io/X of the same minor; another requires go.etcd.io/etcd/server/v3 and calls its
# etcdmain. The binaries are static (no cgo) and report their version (`/version`).
#
# They go to a folder per user and version outside the checkout, printed on stdout (the only
# output when everything is already there), so this works in any clone of the repository:
#     export KUBEBUILDER_ASSETS=$(scripts/install-kube.sh)
# Binaries found in KUBEBUILDER_ASSETS are not built. GANTRY_KUBE_VERSION picks another
# Kubernetes (scripts/test-matrix.sh builds the oldest supported one).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBE_VERSION=${GANTRY_KUBE_VERSION:-${GANTRY_KUBE_DEFAULT_VERSION}}
ETCD_VERSION=v3.6.16
[[ "${KUBE_VERSION}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] ||
  die "GANTRY_KUBE_VERSION takes a Kubernetes release such as v1.37.2, not ${KUBE_VERSION}"
MINOR=${BASH_REMATCH[1]}
STAGING_VERSION="v0.${MINOR}.${BASH_REMATCH[2]}"
CACHE=$(kube_cache "${KUBE_VERSION}")
BIN="${CACHE}/bin"
BUILD="${CACHE}/build"
LOGS="${CACHE}/logs"
KUBE_TARGETS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)

did=() # what this run did, for the closing summary on stderr

# took START: the minutes and seconds since START (a value of SECONDS).
took() { printf '%dm%02ds' $(((SECONDS - $1) / 60)) $(((SECONDS - $1) % 60)); }

# in_assets NAME: KUBEBUILDER_ASSETS has the binary NAME.
in_assets() { [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/$1" ]]; }

missing=()
for b in etcd "${KUBE_TARGETS[@]}"; do
  in_assets "${b}" || [[ -x "${BIN}/${b}" ]] || missing+=("${b}")
done

if ((${#missing[@]})); then
  command -v go >/dev/null ||
    die "no Go: Kubernetes ${KUBE_VERSION} is built from its Go modules, which needs Go 1.26 or newer on PATH"
  mkdir -p "${BIN}" "${BUILD}" "${LOGS}"
  log "building ${missing[*]} of Kubernetes ${KUBE_VERSION} and etcd ${ETCD_VERSION} from their Go modules into ${BIN} (10 to 20 minutes on two cores the first time)"
  # Static binaries, no paths of this machine in them; a newer Go than the machine's is never
  # fetched behind the user's back.
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
fi

# ---------------------------------------------------------------- Kubernetes
kube_missing=()
for b in "${KUBE_TARGETS[@]}"; do
  [[ " ${missing[*]} " == *" ${b} "* ]] && kube_missing+=("${b}")
done
if ((${#kube_missing[@]})); then
  dir="${BUILD}/kubernetes"
  mkdir -p "${dir}"
  start=${SECONDS}
  log "downloading k8s.io/kubernetes ${KUBE_VERSION} (log: ${LOGS}/kube-download.log)"
  gomod=$(cd "${dir}" && go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" 2>"${LOGS}/kube-download.log" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p') ||
    die "the Go module proxy refused k8s.io/kubernetes@${KUBE_VERSION} (is GOPROXY reachable?): $(tail -n 3 "${LOGS}/kube-download.log")"
  [[ -r "${gomod}" ]] || die "no go.mod of k8s.io/kubernetes@${KUBE_VERSION}: $(tail -n 3 "${LOGS}/kube-download.log")"
  # Each staging module, replaced by its published release of the same minor.
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/.*#\1#p' "${gomod}")
  [[ -n "${staging}" ]] || die "found no staging modules in ${gomod}"
  {
    echo "module gantry.invalid/kube-build"
    echo
    echo "go $(sed -n 's/^go //p' "${gomod}")"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    for m in ${staging}; do echo "	${m} => ${m} ${STAGING_VERSION}"; done
    echo ")"
  } >"${dir}/go.mod"
  log "resolving the modules ${KUBE_VERSION} needs (log: ${LOGS}/kube-get.log)"
  pkgs=()
  for b in "${kube_missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${b}@${KUBE_VERSION}"); done
  (cd "${dir}" && run_logged "${LOGS}/kube-get.log" go get "${pkgs[@]}")
  did+=("resolved Kubernetes modules in $(took "${start}")")
  start=${SECONDS}
  log "compiling ${kube_missing[*]} (log: ${LOGS}/kube-build.log)"
  version="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
  version+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${MINOR}"
  version+=" -X k8s.io/component-base/version.gitTreeState=clean"
  version+=" -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
  for b in "${kube_missing[@]}"; do
    # Beside, then renamed: a binary in BIN is always a finished one.
    (cd "${dir}" && run_logged "${LOGS}/kube-build.log" \
      go build -trimpath -ldflags "-s -w ${version}" -o "${BIN}/.${b}.tmp" "k8s.io/kubernetes/cmd/${b}")
    mv -f "${BIN}/.${b}.tmp" "${BIN}/${b}"
    log "built ${b} ($(took "${start}") so far)"
  done
  did+=("compiled ${kube_missing[*]} in $(took "${start}")")
fi

# ---------------------------------------------------------------- etcd
if [[ " ${missing[*]} " == *" etcd "* ]]; then
  dir="${BUILD}/etcd"
  mkdir -p "${dir}"
  start=${SECONDS}
  cat >"${dir}/go.mod" <<EOF
module gantry.invalid/etcd-build

go 1.26
EOF
  cat >"${dir}/main.go" <<'EOF'
// etcd, as its own binary's main calls it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  log "resolving go.etcd.io/etcd/server/v3 ${ETCD_VERSION} (log: ${LOGS}/etcd-get.log)"
  (cd "${dir}" && run_logged "${LOGS}/etcd-get.log" go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}")
  (cd "${dir}" && run_logged "${LOGS}/etcd-get.log" go mod tidy)
  log "compiling etcd (log: ${LOGS}/etcd-build.log)"
  (cd "${dir}" && run_logged "${LOGS}/etcd-build.log" \
    go build -trimpath -ldflags "-s -w" -o "${BIN}/.etcd.tmp" .)
  mv -f "${BIN}/.etcd.tmp" "${BIN}/etcd"
  did+=("built etcd ${ETCD_VERSION} in $(took "${start}")")
fi

# ---------------------------------------------------------------- check
for b in etcd kube-apiserver; do
  in_assets "${b}" || [[ -x "${BIN}/${b}" ]] ||
    die "no ${b} in ${BIN}${KUBEBUILDER_ASSETS:+ nor in KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}}"
done
if ((${#did[@]})); then
  summary=$(printf '%s; ' "${did[@]}")
  log "${summary%; }"
fi
printf '%s\n' "${BIN}"
