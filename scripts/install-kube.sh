#!/usr/bin/env bash
# Provide the Kubernetes binaries gantry's integration tests, demo and
# benchmarks run against: etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl.
#
# The machines only reach Debian's package archive (and crates.io), so no
# upstream release tarball can be downloaded. Instead:
#   * etcd comes from Debian (etcd-server, 3.4),
#   * kube-apiserver, kube-scheduler, kube-controller-manager and kubectl
#     are built from Debian's source package "kubernetes" (upstream 1.20.2
#     with all Go code vendored) with Debian's Go (1.19).
# Results go to <repo>/.cache/kube/bin, which is printed on stdout (the only
# output when everything is already there), so this works:
#     export KUBEBUILDER_ASSETS=$(scripts/install-kube.sh)
# If KUBEBUILDER_ASSETS is already set, binaries found there are not built.
# Every step is skipped when its result exists; delete .cache/kube to redo.
# Needs root for apt-get (only when something is missing).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC_CACHE="${GANTRY_KUBE_CACHE}/src"        # apt-get source downloads
BUILD_ROOT="${GANTRY_KUBE_CACHE}/build"     # unpacked tree (+ kube's _output)
TREE="${BUILD_ROOT}/kubernetes"
BUILD_HOME="${GANTRY_KUBE_CACHE}/home"      # HOME for the build (see below)
LOG_DIR="${GANTRY_KUBE_CACHE}/logs"
DEBIAN_SOURCES=/etc/apt/sources.list.d/debian.sources
SRC_SOURCES=/etc/apt/sources.list.d/gantry-src.sources
SRC_LIST=/etc/apt/sources.list.d/gantry-src.list
KUBE_TARGETS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)

mkdir -p "${LOG_DIR}"
did=()   # what this run did, for the closing summary on stderr

need_root() {
  [[ ${EUID} -eq 0 ]] || die "$1 needs root (apt-get); run as root or do it by hand"
}

# Installed (not merely known to dpkg, e.g. removed with config files left)?
pkg_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

apt_install() {
  need_root "installing $*"
  log "apt-get install $*"
  run_logged "${LOG_DIR}/apt-install.log" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
  did+=("installed $*")
}

# ---------------------------------------------------------------- what is missing
missing=()
for b in "${KUBE_TARGETS[@]}"; do
  kube_bin "${b}" >/dev/null || missing+=("${b}")
done

# ---------------------------------------------------------------- packages
pkgs=()
if ((${#missing[@]})); then
  # The build needs Go, make, and rsync (kube's build copies its outputs
  # with rsync). CGO is off (see the build step), so no C compiler.
  command -v go >/dev/null || pkgs+=(golang-go)
  command -v make >/dev/null || pkgs+=(make)
  command -v rsync >/dev/null || pkgs+=(rsync)
  # reflect2 1.0.2, Go 1.18+-safe, replaces the vendored 1.0.1 (see below).
  pkg_installed golang-github-modern-go-reflect2-dev || pkgs+=(golang-github-modern-go-reflect2-dev)
fi
if ! kube_bin etcd >/dev/null && ! command -v etcd >/dev/null; then
  # Debian's etcd-server is 3.4, which kube-apiserver 1.20 is tested with.
  pkg_installed etcd-server || pkgs+=(etcd-server)
fi
# control-plane.sh needs these two; they are small and often preinstalled.
command -v openssl >/dev/null || pkgs+=(openssl)
command -v curl >/dev/null || pkgs+=(curl ca-certificates)
if ((${#pkgs[@]})); then
  # A fresh machine may never have fetched the package lists.
  if ! apt-cache show "${pkgs[0]}" >/dev/null 2>&1; then
    need_root "apt-get update"
    run_logged "${LOG_DIR}/apt-update.log" apt-get update
  fi
  apt_install "${pkgs[@]}"
fi

# ---------------------------------------------------------------- etcd
mkdir -p "${GANTRY_KUBE_BIN}"
if system_etcd=$(command -v etcd); then
  # A symlink rather than a copy: it follows Debian's security updates.
  if [[ "$(readlink "${GANTRY_KUBE_BIN}/etcd" 2>/dev/null || true)" != "${system_etcd}" ]]; then
    ln -sfn "${system_etcd}" "${GANTRY_KUBE_BIN}/etcd"
    did+=("linked etcd")
  fi
fi

# ---------------------------------------------------------------- source
if ((${#missing[@]})); then
  mkdir -p "${SRC_CACHE}"
  origs=("${SRC_CACHE}"/kubernetes_*.orig.tar.gz)
  if [[ ! -e "${origs[0]}" && ! -d "${TREE}" ]]; then
    need_root "enabling Debian source packages"
    added_sources=0
    # Source packages come from the same archive as the binaries: copy the
    # machine's own apt sources with the type switched to deb-src, so no
    # archive host (nor a mirror/snapshot choice) is hard-coded here.
    if [[ ! -e "${SRC_SOURCES}" && ! -e "${SRC_LIST}" ]]; then
      if [[ -r "${DEBIAN_SOURCES}" ]]; then
        # deb822 format (bookworm default): one stanza per archive.
        sed -E 's/^Types:.*/Types: deb-src/' "${DEBIAN_SOURCES}" >"${SRC_SOURCES}.tmp"
        mv "${SRC_SOURCES}.tmp" "${SRC_SOURCES}"
      elif [[ -r /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
        # One-line format (older or upgraded machines).
        sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"${SRC_LIST}.tmp"
        mv "${SRC_LIST}.tmp" "${SRC_LIST}"
      else
        die "found no apt sources (${DEBIAN_SOURCES} or /etc/apt/sources.list) to derive deb-src from"
      fi
      added_sources=1
      did+=("enabled deb-src")
    fi
    if ((added_sources)) || ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes$'; then
      log "apt-get update (for deb-src)"
      run_logged "${LOG_DIR}/apt-update.log" apt-get update
    fi
    log "apt-get source --download-only kubernetes"
    # apt drops to the _apt user to download, which cannot write into the
    # repo; it then falls back to root with a warning. Say root up front.
    apt_source() (cd "${SRC_CACHE}" && apt-get -o APT::Sandbox::User=root source --download-only kubernetes)
    run_logged "${LOG_DIR}/apt-source.log" apt_source
    origs=("${SRC_CACHE}"/kubernetes_*.orig.tar.gz)
    [[ -e "${origs[0]}" ]] || die "apt-get source did not produce kubernetes_*.orig.tar.gz in ${SRC_CACHE}"
    did+=("downloaded $(basename "${origs[0]}")")
  fi

  # -------------------------------------------------------------- unpack
  if [[ ! -d "${TREE}" ]]; then
    # The unpacked tree and the build take about 2.5 GiB.
    free_kib=$(df -Pk "${GANTRY_KUBE_CACHE}" | awk 'NR == 2 { print $4 }')
    if [[ -n "${free_kib}" ]] && ((free_kib < 3 * 1024 * 1024)); then
      log "warning: only $((free_kib / 1024)) MiB free in ${GANTRY_KUBE_CACHE}; the source tree and its build take about 2.5 GiB"
    fi
    # The upstream tree as Debian ships it (vendor/ included). Debian's own
    # patches only touch kubectl's printing and are not needed here.
    # Unpack beside and rename, so an interrupted unpack is never taken for
    # a finished one.
    rm -rf "${TREE}.tmp"
    mkdir -p "${TREE}.tmp"
    run_logged "${LOG_DIR}/unpack.log" \
      tar -xzf "${origs[-1]}" -C "${TREE}.tmp" --strip-components=1
    mv "${TREE}.tmp" "${TREE}"
    did+=("unpacked source")
  fi

  # -------------------------------------------------------------- patch
  # Kubernetes 1.20 vendors github.com/modern-go/reflect2 v1.0.1, which
  # relies on Go runtime internals that changed in Go 1.18: built with
  # Debian's Go 1.19 it compiles, but kube-apiserver panics (nil pointer
  # in reflect2.(*frozenConfig).Type2, via json-iterator) on the first
  # request with a JSON body that holds a map, e.g. creating a Node, and
  # kubectl hits the same code when decoding. v1.0.2 fixes exactly this
  # (upstream Kubernetes took it in 1.24) and has the same API; Debian
  # packages it, so swap it into vendor/. (kube 1.20 builds in GOPATH
  # mode, where vendor/modules.txt is not checked.)
  vendored="${TREE}/vendor/github.com/modern-go/reflect2"
  if [[ ! -e "${vendored}/go_above_118.go" ]]; then
    r2=$(dpkg -L golang-github-modern-go-reflect2-dev | grep '/reflect2/reflect2\.go$' | head -n 1) ||
      die "golang-github-modern-go-reflect2-dev has no reflect2.go"
    r2=$(dirname "${r2}")
    [[ -e "${r2}/go_above_118.go" ]] || die "${r2} is not reflect2 >= 1.0.2"
    rsync -a --delete --exclude=go.mod "${r2}/" "${vendored}/"
    did+=("patched vendored reflect2 to $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev)")
  fi

  # -------------------------------------------------------------- build
  whats=()
  for b in "${missing[@]}"; do whats+=("cmd/${b}"); done
  log "building ${missing[*]} from Kubernetes source (several minutes; log: ${LOG_DIR}/build.log)"
  mkdir -p "${BUILD_HOME}"
  start=${SECONDS}
  # Why these variables:
  #  HOME           kube's build and Go write caches under HOME; keep them
  #                 in the cache folder rather than root's home.
  #  GO111MODULE    kube 1.20 builds in GOPATH mode with vendor/ (its
  #                 hack/lib/init.sh sets off too); explicit so a user's
  #                 GO111MODULE/GOFLAGS (e.g. -mod=mod) cannot leak in:
  #                 -mod is an error in GOPATH mode.
  #  GOPROXY=off    nothing may be fetched: everything is vendored.
  #  CGO_ENABLED=0  as Debian's packaging does: kube's code generators are
  #                 then pure Go too, so no C toolchain is needed.
  #  GOTOOLCHAIN    ignored by Go 1.19; stops a newer Go from downloading one.
  run_logged "${LOG_DIR}/build.log" \
    env -u GOBIN -u GOPATH HOME="${BUILD_HOME}" GO111MODULE=off GOFLAGS= GOPROXY=off \
      CGO_ENABLED=0 GOTOOLCHAIN=local \
      make -C "${TREE}" WHAT="${whats[*]}"
  for b in "${missing[@]}"; do
    [[ -x "${TREE}/_output/bin/${b}" ]] || die "build finished but ${TREE}/_output/bin/${b} is missing"
    # Copy beside and rename: never leave a half-written binary behind.
    cp "${TREE}/_output/bin/${b}" "${GANTRY_KUBE_BIN}/.${b}.tmp"
    mv -f "${GANTRY_KUBE_BIN}/.${b}.tmp" "${GANTRY_KUBE_BIN}/${b}"
  done
  did+=("built ${missing[*]} in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s")
fi

# ---------------------------------------------------------------- check
for b in etcd kube-apiserver; do
  kube_bin "${b}" >/dev/null || die "no ${b} in ${GANTRY_KUBE_BIN}${KUBEBUILDER_ASSETS:+ nor in KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}}"
done

if ((${#did[@]})); then
  summary=$(printf '%s; ' "${did[@]}")
  log "${summary%; }"
fi
printf '%s\n' "${GANTRY_KUBE_BIN}"
