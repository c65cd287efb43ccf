# shellcheck shell=bash
# Shared helpers of the scripts (install-kube.sh, control-plane.sh, demo.sh, the benchmarks).
# Sourced, never executed: the callers set `set -euo pipefail` themselves.

# The repository root, found from this file's own location so the scripts
# work from any current directory and in any clone (CI clones elsewhere).
GANTRY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# The Kubernetes release the tests, the demo and the benchmarks run against (install-kube.sh
# builds it; GANTRY_KUBE_VERSION picks another).
GANTRY_KUBE_DEFAULT_VERSION=v1.37.2

# kube_cache VERSION: where install-kube.sh builds Kubernetes VERSION: a folder per user and
# version outside the checkout, so that every clone on the machine (CI's fresh one too)
# shares one build.
kube_cache() { printf '%s\n' "${XDG_CACHE_HOME:-${HOME}/.cache}/gantry/kube-$1"; }

# The binaries of the Kubernetes in use.
GANTRY_KUBE_BIN="$(kube_cache "${GANTRY_KUBE_VERSION:-${GANTRY_KUBE_DEFAULT_VERSION}}")/bin"

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
# The exit status and the free space of the log's file system are shown
# too: a full disk fails a command without a word, as its log cannot be
# written either.
run_logged() {
  local logfile=$1; shift
  local status=0
  "$@" >"${logfile}" 2>&1 || status=$?
  if ((status)); then
    printf '%s: error: command failed (exit status %d): %s\n' "${0##*/}" "${status}" "$*" >&2
    printf -- '--- last lines of %s ---\n' "${logfile}" >&2
    tail -n 40 "${logfile}" >&2 || true
    printf -- '--- free space where it was written ---\n' >&2
    df -h "$(dirname "${logfile}")" >&2 || true
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
# or a port of its own (--secure-port=0: nothing reads its /healthz or /metrics), all its
# output in LOG, ARGs added to its command line. Sets
# PV_CONTROLLER_PID.
# shellcheck disable=SC2034  # the variables it sets are the caller's
start_pv_controller() {
  local kubeconfig=$1 logfile=$2 kcm
  shift 2
  kcm=$(kube_bin kube-controller-manager) || die "kube-controller-manager missing: run scripts/install-kube.sh"
  "${kcm}" --kubeconfig "${kubeconfig}" --controllers=persistentvolume-binder \
    --leader-elect=false --secure-port=0 "$@" >"${logfile}" 2>&1 &
  PV_CONTROLLER_PID=$!
}

# bench_gantry_config FILE [coscheduling]: gantry's configuration in the end-to-end
# benchmarks: the default profile serving default-scheduler, leader election off, client
# qps/burst 5000; with `coscheduling`, Coscheduling enabled in place of PrioritySort (gang
# scheduling, as the README's "Gang scheduling" configures it, its default arguments).
# GANTRY_PERCENTAGE in the environment sets percentageOfNodesToScore (0: kube-scheduler's
# adaptive sample; unset: gantry's default, every node), to compare the two in one session.
bench_gantry_config() {
  local percentage=
  if [[ -n "${GANTRY_PERCENTAGE:-}" ]]; then
    [[ "${GANTRY_PERCENTAGE}" =~ ^[0-9]+$ ]] || die "GANTRY_PERCENTAGE takes a number, not ${GANTRY_PERCENTAGE}"
    percentage="percentageOfNodesToScore: ${GANTRY_PERCENTAGE}"
  fi
  cat >"$1" <<EOC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  qps: 5000
  burst: 5000
${percentage}
profiles:
- schedulerName: default-scheduler
EOC
  if [[ "${2:-}" == coscheduling ]]; then
    cat >>"$1" <<EOC
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
      disabled: [{name: PrioritySort}]
EOC
  fi
}

# bench_kube_scheduler_config FILE KUBECONFIG: kube-scheduler's counterpart (the version
# install-kube.sh builds), in kubescheduler.config.k8s.io/v1: the default profile, leader
# election off, KUBECONFIG as its client connection, qps/burst 5000. Where it serves /healthz
# and /metrics is on its command line (bench_kube_scheduler_command): the v1 configuration has
# no address for them.
bench_kube_scheduler_config() {
  cat >"$1" <<EOC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: $2
  qps: 5000
  burst: 5000
profiles:
- schedulerName: default-scheduler
EOC
}

# bench_kube_scheduler_command CONFIG KUBECONFIG PORT: sets KUBE_SCHEDULER_COMMAND to
# KUBE_SCHEDULER's command line with the configuration CONFIG, serving /healthz and /metrics
# over HTTPS on 127.0.0.1:PORT (its only way to serve them; a self-signed certificate made in
# memory, which whoever reads them accepts on loopback), as crates/test-support/src/component.rs starts
# it. KUBECONFIG is for the delegated authentication and authorization of that port, whose
# lookup of client CA settings is skipped (this API server publishes none: it would log an
# error per retry), and /metrics is open to anyone like /healthz, so that cluster-bench reads it
# without a token.
# shellcheck disable=SC2034  # the variable it sets is the caller's
bench_kube_scheduler_command() {
  KUBE_SCHEDULER_COMMAND=("${KUBE_SCHEDULER}" --config "$1"
    --bind-address=127.0.0.1 --secure-port="$3"
    --authentication-kubeconfig="$2" --authentication-skip-lookup
    --authorization-kubeconfig="$2"
    --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics)
}

# The end-to-end benchmarks' shared steps (bench-cluster.sh, bench-volumes.sh,
# bench-preemption.sh).

# bench_scheduler_command RUN PORT NULL: the command line of ${scheduler} (null, gantry or
# kube-scheduler) in COMMAND and its --metrics option in METRICS; its configuration files go
# to RUN, its metrics to PORT. The null scheduler is `cluster-bench NULL` (null-binder or
# null-preemptor), which serves no metrics.
# shellcheck disable=SC2034  # the variables it sets are the caller's
bench_scheduler_command() {
  local run=$1 port=$2 null=$3
  METRICS=(--metrics "http://127.0.0.1:${port}/metrics")
  case "${scheduler}" in
    null)
      METRICS=()
      COMMAND=("${BENCH}" "${null}" --kubeconfig "${KUBECONFIG}")
      ;;
    gantry)
      bench_gantry_config "${run}/gantry.yaml"
      COMMAND=("${GANTRY}" run --config "${run}/gantry.yaml" --kubeconfig "${KUBECONFIG}"
        --address "127.0.0.1:${port}" --secure-port 0)
      ;;
    kube-scheduler)
      bench_kube_scheduler_config "${run}/kube-scheduler.yaml" "${KUBECONFIG}"
      bench_kube_scheduler_command "${run}/kube-scheduler.yaml" "${KUBECONFIG}" "${port}"
      COMMAND=("${KUBE_SCHEDULER_COMMAND[@]}")
      METRICS=(--metrics "https://127.0.0.1:${port}/metrics")
      ;;
  esac
}

# bench_usage FIRST LAST: prints the lines FIRST to LAST of the calling script (its synopsis,
# in its header comment) without their comment marks, and exits 2.
bench_usage() {
  sed -n "$1,$2p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# bench_option ARG [VALUE]: handles an option every benchmark takes: --nodes, --pods,
# --schedulers (or --scheduler), --rounds, --out (each with a value), --perf and --no-build,
# setting NODES, PODS, SCHEDULERS, ROUNDS, OUT, PERF (1) or BUILD (empty). Sets BENCH_SHIFT
# to the words it took, 0 when ARG is none of these (the script's own then, or unknown).
# shellcheck disable=SC2034  # the variables it sets are the caller's
bench_option() {
  BENCH_SHIFT=2
  case "$1" in
    --nodes) NODES=${2:?} ;;
    --pods) PODS=${2:?} ;;
    --schedulers | --scheduler) SCHEDULERS=${2:?} ;;
    --rounds) ROUNDS=${2:?} ;;
    --out) OUT=${2:?} ;;
    --perf) PERF=1; BENCH_SHIFT=1 ;;
    --no-build) BUILD=; BENCH_SHIFT=1 ;;
    *) BENCH_SHIFT=0 ;;
  esac
}

# bench_wait_quiet: on a shared machine, waits while the file BENCH_HOLD_FILE names exists
# (others hold the benchmark off while they measure something else).
bench_wait_quiet() {
  while [[ -n "${BENCH_HOLD_FILE:-}" && -e "${BENCH_HOLD_FILE}" ]]; do
    log "waiting: ${BENCH_HOLD_FILE} exists"
    sleep 15
  done
}

# bench_binaries: the Kubernetes binaries (scripts/install-kube.sh prints the folder it fills
# and is quiet once everything is in place; binaries already in KUBEBUILDER_ASSETS win, which
# is exported) and, unless BUILD is empty, gantry and cluster-bench built (release, once the
# machine is quiet). Sets KUBE_SCHEDULER, GANTRY and BENCH; GANTRY set in the environment runs
# that gantry binary instead (to compare two builds on the same benchmark).
# shellcheck disable=SC2034  # the variables it sets are the caller's
bench_binaries() {
  local kube_bin_dir
  kube_bin_dir=$("${GANTRY_ROOT}/scripts/install-kube.sh")
  export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-${kube_bin_dir}}"
  KUBE_SCHEDULER=$(kube_bin kube-scheduler) || die "no kube-scheduler binary"
  if [[ -n "${BUILD}" ]]; then
    bench_wait_quiet
    log "building gantry and cluster-bench (release)"
    cargo build --release --locked --quiet --bin gantry --bin cluster-bench
  fi
  GANTRY="${GANTRY:-${GANTRY_ROOT}/target/release/gantry}"
  BENCH="${GANTRY_ROOT}/target/release/cluster-bench"
  [[ -x "${GANTRY}" && -x "${BENCH}" ]] || die "build gantry and cluster-bench first (cargo build --release)"
}

# bench_out NAME: the results folder, OUT (default target/NAME/<date>), created; OUT is made
# absolute.
bench_out() {
  OUT=${OUT:-${GANTRY_ROOT}/target/$1/$(date +%Y%m%d-%H%M%S)}
  mkdir -p "${OUT}"
  OUT=$(cd "${OUT}" && pwd -P)
}

# bench_machine COMMAND [LINE...]: writes OUT/machine.txt: the date, COMMAND (the run's
# command line), the commit, the LINEs (versions of what is measured), then the machine: cpu,
# memory, kernel, OS and load.
bench_machine() {
  local command=$1
  shift
  {
    echo "date: $(date -Iseconds)"
    echo "command: ${command}"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    (($# == 0)) || printf '%s\n' "$@"
    echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "kernel: $(uname -sr)"
    # shellcheck source=/dev/null
    echo "os: $(. /etc/os-release && echo "${PRETTY_NAME}")"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"${OUT}/machine.txt"
}

# bench_order ROUND: the schedulers of SCHEDULER_LIST in the order round ROUND takes them, in
# ORDER: even rounds reverse it, so that a drift of the machine or of the control plane over
# a round favours each scheduler as often as it hurts it.
bench_order() {
  local i
  ORDER=("${SCHEDULER_LIST[@]}")
  if (($1 % 2 == 0)); then
    ORDER=()
    for ((i = ${#SCHEDULER_LIST[@]} - 1; i >= 0; i--)); do ORDER+=("${SCHEDULER_LIST[i]}"); done
  fi
}

# bench_report RESULT...: cluster-bench's report of the runs, also in OUT/report.md, then the
# machine.
bench_report() {
  "${BENCH}" report "$@" | tee "${OUT}/report.md"
  echo
  cat "${OUT}/machine.txt"
  log "results in ${OUT}"
}

# install_podgroup_crd KUBECTL KUBECONFIG: applies deploy/05-podgroup-crd.yaml and waits until
# the API server serves PodGroups (established, and listed by discovery, where gantry looks
# when it starts).
install_podgroup_crd() {
  local kubectl=$1 kubeconfig=$2 i
  "${kubectl}" --kubeconfig "${kubeconfig}" apply -f "${GANTRY_ROOT}/deploy/05-podgroup-crd.yaml" >/dev/null
  "${kubectl}" --kubeconfig "${kubeconfig}" wait --for condition=Established --timeout=60s \
    crd/podgroups.scheduling.x-k8s.io >/dev/null
  for ((i = 0; i < 300; i++)); do
    if "${kubectl}" --kubeconfig "${kubeconfig}" get --raw /apis/scheduling.x-k8s.io/v1alpha1 2>/dev/null |
      grep -q podgroups; then
      return 0
    fi
    sleep 0.2
  done
  die "PodGroups not served 60 s after the CRD was applied"
}
