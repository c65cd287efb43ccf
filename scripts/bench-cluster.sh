#!/usr/bin/env bash
# Issue 4's end-to-end benchmark: throughput, latency and memory of three schedulers against a
# real (local) kube-apiserver and etcd, on the same synthetic cluster.
#
#   scripts/bench-cluster.sh [--nodes 5000[,N...]] [--pods 10000]
#       [--workload plain,constrained] [--schedulers null,gantry,kube-scheduler]
#       [--null-in-flight N] [--gantry-config FILE] [--rounds 1] [--out DIR] [--perf]
#       [--perf-apiserver] [--no-build]
#
# For every cluster size, one control plane, where `cluster-bench populate` creates the nodes
# (32 cpu, 128Gi, 110 pods, Ready, three zones). Then for every round, workload and scheduler:
#  1. `cluster-bench populate` creates a fresh set of pending pods in a namespace of the run's
#     own (100m..2 cpu, 128Mi..2Gi; "constrained": pods of 100 deployments with preferred pod
#     anti-affinity on the hostname and a zone topology spread constraint), all with
#     schedulerName default-scheduler, before the scheduler starts;
#  2. `cluster-bench run` waits until the API server and etcd are idle, starts the scheduler,
#     watches the bindings until every pod is bound, reads the scheduler's /metrics, peak RSS
#     (VmHWM) and CPU time, stops it, and checks that every pod is bound once and no node holds
#     more than its allocatable cpu, memory or pods;
#  3. `cluster-bench clear` deletes the run's pods and events, so that every scheduler finds
#     the same empty nodes, and compacts and defragments etcd, so that it finds etcd as small.
# Even rounds take the schedulers in the reverse order. At the end, `cluster-bench report`
# prints the table, gantry's ratios in every round and issue 4's targets.
# The schedulers:
#  null            `cluster-bench null-binder`: binds round-robin, no decision, --null-in-flight
#                  bindings in flight (default: null-binder's --in-flight; what the API
#                  server can bind: the ceiling);
#  gantry          `gantry run`, default profile, leader election off, clientConnection
#                  qps/burst 5000;
#  kube-scheduler  kube-scheduler 1.20.2 (scripts/install-kube.sh), default profile, leader
#                  election off, clientConnection qps/burst 5000.
# All use the admin kubeconfig (system:masters: exempt from API priority and fairness).
#
# --rounds N repeats the whole set N times, one round after the other: the speed of a shared
# machine drifts by a third over minutes, so a ratio means most between the runs of one
# round, and the report judges the targets on the median of the rounds' ratios (and says
# how many rounds hold on their own).
# Results (one JSON per run, logs, report.md) go to DIR, default
# target/bench-cluster/<date>. --gantry-config runs gantry with another configuration (to
# compare settings; its profile must serve default-scheduler). --perf records gantry with
# `perf record`, with the default options of `cluster-bench run --perf-options`
# (DIR/<run>/perf.data; $PERF_OPTIONS replaces those options). --perf-apiserver records
# kube-apiserver the same way, for every scheduler (DIR/<run>/perf-apiserver.data). Every run
# keeps the API server's metrics after the last binding (DIR/<run>/apiserver-metrics.txt:
# requests by verb and resource, watch events).
# --no-build uses the release binaries as they are.
# On a shared machine, set BENCH_HOLD_FILE to a path: while that file exists, every run waits
# (others can hold the benchmark off while they measure something else).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${GANTRY_ROOT}"

NODES=5000
PODS=10000
WORKLOADS=plain,constrained
SCHEDULERS=null,gantry,kube-scheduler
ROUNDS=1
NULL_IN_FLIGHT=
GANTRY_CONFIG=
OUT=
PERF=
PERF_APISERVER=
# `perf record` options for --perf instead of cluster-bench run's; e.g.
# PERF_OPTIONS="-e cpu-clock -F 500 --call-graph dwarf" gives call chains through code built
# without frame pointers.
PERF_OPTIONS=${PERF_OPTIONS:-}
BUILD=1
QUIET_FILE=${BENCH_HOLD_FILE:-}

usage() {
  sed -n '4,6p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while (($#)); do
  case "$1" in
    --nodes) NODES=${2:?}; shift 2 ;;
    --pods) PODS=${2:?}; shift 2 ;;
    --workload | --workloads) WORKLOADS=${2:?}; shift 2 ;;
    --schedulers | --scheduler) SCHEDULERS=${2:?}; shift 2 ;;
    --null-in-flight) NULL_IN_FLIGHT=${2:?}; shift 2 ;;
    --gantry-config) GANTRY_CONFIG=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --perf) PERF=1; shift ;;
    --perf-apiserver) PERF_APISERVER=1; shift ;;
    --no-build) BUILD=; shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
IFS=, read -r -a NODE_LIST <<<"${NODES}"
IFS=, read -r -a WORKLOAD_LIST <<<"${WORKLOADS}"
IFS=, read -r -a SCHEDULER_LIST <<<"${SCHEDULERS}"
((${#NODE_LIST[@]} && ${#WORKLOAD_LIST[@]} && ${#SCHEDULER_LIST[@]})) ||
  die "--nodes, --workload and --schedulers each need at least one value"
for w in "${WORKLOAD_LIST[@]}"; do
  [[ "${w}" == plain || "${w}" == constrained ]] || die "unknown workload ${w}"
done
for s in "${SCHEDULER_LIST[@]}"; do
  [[ "${s}" == null || "${s}" == gantry || "${s}" == kube-scheduler ]] || die "unknown scheduler ${s}"
done
[[ -z "${PERF}${PERF_APISERVER}" ]] || command -v perf >/dev/null || die "--perf needs perf (apt-get install linux-perf)"

wait_quiet() {
  while [[ -e "${QUIET_FILE}" ]]; do
    log "waiting: ${QUIET_FILE} exists"
    sleep 15
  done
}

# install-kube.sh prints the folder it fills (and is quiet once everything is in place);
# binaries already in KUBEBUILDER_ASSETS win.
kube_bin_dir=$(scripts/install-kube.sh)
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-${kube_bin_dir}}"
KUBE_SCHEDULER=$(kube_bin kube-scheduler) || die "no kube-scheduler binary"
if [[ -n "${BUILD}" ]]; then
  wait_quiet
  log "building gantry and cluster-bench (release)"
  cargo build --release --locked --quiet --bin gantry --bin cluster-bench
fi
GANTRY="${GANTRY_ROOT}/target/release/gantry"
BENCH="${GANTRY_ROOT}/target/release/cluster-bench"
[[ -x "${GANTRY}" && -x "${BENCH}" ]] || die "build gantry and cluster-bench first (cargo build --release)"

OUT=${OUT:-${GANTRY_ROOT}/target/bench-cluster/$(date +%Y%m%d-%H%M%S)}
mkdir -p "${OUT}"
OUT=$(cd "${OUT}" && pwd -P)
{
  echo "date: $(date -Iseconds)"
  echo "command: scripts/bench-cluster.sh --nodes ${NODES} --pods ${PODS} --workload ${WORKLOADS} --schedulers ${SCHEDULERS}${NULL_IN_FLIGHT:+ --null-in-flight ${NULL_IN_FLIGHT}} --rounds ${ROUNDS}${GANTRY_CONFIG:+ --gantry-config ${GANTRY_CONFIG}}"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -sr)"
  # shellcheck source=/dev/null
  echo "os: $(. /etc/os-release && echo "${PRETTY_NAME}")"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"${OUT}/machine.txt"

STATE=
cleanup() {
  if [[ -n "${STATE}" ]]; then
    scripts/control-plane.sh stop "${STATE}" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

[[ "${ROUNDS}" =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a positive number, not ${ROUNDS}"
RESULTS=()
for nodes in "${NODE_LIST[@]}"; do
  wait_quiet
  STATE="${OUT}/control-plane-${nodes}n"
  mkdir -p "${STATE}"
  log "${nodes} nodes: starting the control plane"
  scripts/control-plane.sh start "${STATE}" 2>"${STATE}/control-plane.log"
  # shellcheck source=/dev/null
  . "${STATE}/env"
  "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --nodes "${nodes}"
  for ((round = 1; round <= ROUNDS; round++)); do
    suffix=
    ((ROUNDS == 1)) || suffix="-r${round}"
    # Even rounds take the schedulers in the reverse order: a drift of the machine or of the
    # control plane over a round then favours each scheduler as often as it hurts it.
    order=("${SCHEDULER_LIST[@]}")
    if ((round % 2 == 0)); then
      order=()
      for ((i = ${#SCHEDULER_LIST[@]} - 1; i >= 0; i--)); do order+=("${SCHEDULER_LIST[i]}"); done
    fi
    for workload in "${WORKLOAD_LIST[@]}"; do
      for scheduler in "${order[@]}"; do
        wait_quiet
        name="${nodes}n-${PODS}p-${workload}-${scheduler}${suffix}"
        RUN="${OUT}/${name}"
        namespace="${workload}-${scheduler}${suffix}"
        mkdir -p "${RUN}"
        "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --pods "${PODS}" \
          --workload "${workload}" --namespace "${namespace}"
        port=$("${BENCH}" free-port)
        metrics=(--metrics "http://127.0.0.1:${port}/metrics")
        extra=(--apiserver-metrics "${RUN}/apiserver-metrics.txt")
        [[ -z "${PERF_OPTIONS}" ]] || extra+=(--perf-options "${PERF_OPTIONS}")
        [[ -z "${PERF_APISERVER}" ]] || extra+=(--perf-apiserver "${RUN}/perf-apiserver.data")
        case "${scheduler}" in
          null)
            metrics=()
            command=("${BENCH}" null-binder --kubeconfig "${KUBECONFIG}")
            [[ -z "${NULL_IN_FLIGHT}" ]] || command+=(--in-flight "${NULL_IN_FLIGHT}")
            ;;
          gantry)
            if [[ -n "${GANTRY_CONFIG}" ]]; then
              cp "${GANTRY_CONFIG}" "${RUN}/gantry.yaml"
            else
              bench_gantry_config "${RUN}/gantry.yaml"
            fi
            command=("${GANTRY}" run --config "${RUN}/gantry.yaml" --kubeconfig "${KUBECONFIG}"
              --address "127.0.0.1:${port}")
            [[ -z "${PERF}" ]] || extra+=(--perf "${RUN}/perf.data")
            ;;
          kube-scheduler)
            bench_kube_scheduler_config "${RUN}/kube-scheduler.yaml" "${KUBECONFIG}" "${port}"
            command=("${KUBE_SCHEDULER}" --config "${RUN}/kube-scheduler.yaml" --secure-port=0)
            ;;
        esac
        log "${name}: measuring"
        "${BENCH}" run --kubeconfig "${KUBECONFIG}" --namespace "${namespace}" \
          --scheduler "${scheduler}" --workload "${workload}" --nodes "${nodes}" \
          "${metrics[@]}" "${extra[@]}" --apiserver-pid "${APISERVER_PID}" --etcd-pid "${ETCD_PID}" \
          --out "${OUT}/${name}.json" --log "${RUN}/scheduler.log" -- "${command[@]}"
        RESULTS+=("${OUT}/${name}.json")
        "${BENCH}" clear --kubeconfig "${KUBECONFIG}" --namespace "${namespace}" --etcd "${ETCD_URL}"
      done
    done
  done
  scripts/control-plane.sh stop "${STATE}" 2>>"${STATE}/control-plane.log"
  rm -rf "${STATE}/etcd"
  STATE=
done
"${BENCH}" report "${RESULTS[@]}" | tee "${OUT}/report.md"
echo
cat "${OUT}/machine.txt"
log "results in ${OUT}"
