# shellcheck shell=bash
# Shared helpers of the scripts (install-kube.sh, control-plane.sh, demo.sh, the benchmarks).
# Sourced, never executed: the callers set `set -euo pipefail` themselves.

# The repository root, found from this file's own location so the scripts
# work from any current directory and in any clone (CI clones elsewhere).
GANTRY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# Everything the scripts build or download lives here (git-ignored).
GANTRY_KUBE_CACHE="${GANTRY_ROOT}/.cache/kube"
GANTRY_KUBE_BIN="${GANTRY_KUBE_CACHE}/bin"

# Absolute, so paths handed to servers and written to env files stay
# valid from any directory.
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -d "${KUBEBUILDER_ASSETS}" ]]; then
  KUBEBUILDER_ASSETS=$(cd "${KUBEBUILDER_ASSETS}" && pwd -P)
fi

# Progress and errors go to stderr so that stdout stays machine-readable
# (install-kube.sh prints only the bin folder there).
log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# run_logged LOGFILE CMD...: run CMD with all its output in LOGFILE; on
# failure show the end of the log and stop, so failures are loud but
# successful runs stay quiet.
run_logged() {
  local logfile=$1; shift
  if ! "$@" >"${logfile}" 2>&1; then
    printf '%s: error: command failed: %s\n' "${0##*/}" "$*" >&2
    printf -- '--- last lines of %s ---\n' "${logfile}" >&2
    tail -n 40 "${logfile}" >&2 || true
    exit 1
  fi
}

# kube_bin NAME: path of the binary NAME (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl). KUBEBUILDER_ASSETS
# (the envtest convention: a folder holding etcd and kube-apiserver, often
# kubectl too) wins when it has the binary; otherwise the folder
# install-kube.sh fills. Prints nothing and returns 1 when neither has it.
kube_bin() {
  local name=$1
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/${name}" ]]; then
    printf '%s\n' "${KUBEBUILDER_ASSETS}/${name}"
  elif [[ -x "${GANTRY_KUBE_BIN}/${name}" ]]; then
    printf '%s\n' "${GANTRY_KUBE_BIN}/${name}"
  else
    return 1
  fi
}

# start_pv_controller KUBECONFIG LOG [ARG...]: the PersistentVolume controller in the
# background: kube-controller-manager running that controller only, without leader election
# or an HTTP port, all its output in LOG, ARGs added to its command line. Sets
# PV_CONTROLLER_PID.
start_pv_controller() {
  local kubeconfig=$1 logfile=$2 kcm
  shift 2
  kcm=$(kube_bin kube-controller-manager) || die "kube-controller-manager missing: run scripts/install-kube.sh"
  "${kcm}" --kubeconfig "${kubeconfig}" --controllers=persistentvolume-binder \
    --leader-elect=false --port=0 --secure-port=0 "$@" >"${logfile}" 2>&1 &
  PV_CONTROLLER_PID=$!
}

# bench_gantry_config FILE: gantry's configuration in the end-to-end benchmarks: the default
# profile serving default-scheduler, leader election off, client qps/burst 5000.
bench_gantry_config() {
  cat >"$1" <<EOC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  qps: 5000
  burst: 5000
profiles:
- schedulerName: default-scheduler
EOC
}

# bench_kube_scheduler_config FILE KUBECONFIG PORT: kube-scheduler 1.20's counterpart, in
# v1beta1 (the newest version 1.20 reads), its healthz and metrics served over plain HTTP on
# PORT (run it with --secure-port=0, which turns the HTTPS port and its delegated
# authentication off).
bench_kube_scheduler_config() {
  cat >"$1" <<EOC
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: $2
  qps: 5000
  burst: 5000
healthzBindAddress: 127.0.0.1:$3
metricsBindAddress: 127.0.0.1:$3
profiles:
- schedulerName: default-scheduler
EOC
}
