#!/usr/bin/env bash
# Issue 50's comparison on kube-scheduler's own scheduler_perf workloads (Kubernetes 1.37.2,
# test/integration/scheduler_perf/*/performance-config.yaml with their templates, read from the
# k8s.io/kubernetes Go module): gantry against kube-scheduler 1.37.2 side by side, through a
# real (local) kube-apiserver and etcd. PreemptionBasic and the volume workloads have scripts
# of their own (bench-preemption.sh, bench-volumes.sh); this one replays the others.
#
#   scripts/bench-scheduler-perf.sh [--workloads TESTCASE/WORKLOAD,...] [--param NAME=N]...
#       [--schedulers null,gantry,kube-scheduler] [--rounds 1] [--out DIR] [--perf] [--no-build]
#
# --workloads names test cases and their workloads (the workload is everything after the
# first slash: Unschedulable/5kNodes/100Init/10kPods). The default, each at its 5,000-node
# size with the most measured pods (SchedulingWhileGated has one node only):
#   SchedulingBasic/5000Nodes_10000Pods, SchedulingPodAntiAffinity/5000Nodes_2000Pods,
#   SchedulingPodAffinity/5000Nodes_5000Pods, SchedulingNodeAffinity/5000Nodes_10000Pods,
#   TopologySpreading/5000Nodes_5000Pods, PreferredTopologySpreading/5000Nodes_5000Pods,
#   Unschedulable/5kNodes/100Init/10kPods, SchedulingWhileGated/1Node_10000GatedPods,
#   SchedulingWithMixedChurn/5000Nodes_10000Pods.
# --param NAME=N replaces a workload parameter in every workload (a smaller run:
# --workloads SchedulingBasic/500Nodes --param measurePods=200).
#
# `cluster-bench scheduler-perf` (src/bin/cluster-bench/scheduler_perf.rs) reads the
# workload's ops with its params substituted and refuses any op or field it does not carry
# out. For every workload, one control plane, where it creates the nodes (createNodes: the
# template, its hostname label, the label strategy). Then for every round and scheduler:
#  1. `scheduler-perf init` carries out the ops before the measured one: namespaces, the init
#     pods (pending; a template's `priority: N` becomes a PriorityClass of that value, which
#     the real API server's Priority admission asks for), sleeps;
#  2. `cluster-bench run` starts the scheduler and stops it once it has bound every init pod
#     (DIR/<run>-init.json); skipped when the workload has none;
#  3. `scheduler-perf measured` creates the measured pods (those of the createPods op with
#     collectMetrics: true, in its namespace), pending;
#  4. `cluster-bench run` waits until the API server and etcd are idle, starts the same
#     scheduler again, and measures until every measured pod is bound: pods per second from
#     the scheduler's start and from its first binding to the last (scheduler_perf's
#     SchedulingThroughput counts from the first binding too), peak RSS, CPU; it checks that
#     every measured pod is bound exactly once and no node holds more than its allocatable,
#     the workload's other pods included, and that no gated pod got bound;
#  5. `cluster-bench clear` deletes the pods and events of every namespace the workload used,
#     and compacts and defragments etcd.
# Even rounds take the schedulers in the reverse order. At the end, `cluster-bench report`
# prints the tables and gantry's ratios to kube-scheduler per round.
#
# The deviation from scheduler_perf, as in bench-preemption.sh: scheduler_perf creates the
# measured pods while the scheduler runs, which bounds its figure by how fast it creates them
# (here about 1,000-2,000 pods a second, which would cap both schedulers and hide the ratio).
# Here the init pods are placed first (step 2), then the measured pods are all pending when
# the scheduler starts again (step 4): each scheduler is measured from a full queue, its own
# startup (listing the nodes and pods) counted against it. Per workload:
#  * SchedulingBasic, the affinity ones, TopologySpreading, PreferredTopologySpreading: as
#    above.
#  * Unschedulable: its churn op (a pod of pod-high-priority-large-cpu.yaml, 9 cpu on nodes of
#    4, every 200 ms) runs next to the measured scheduler, started and stopped with it
#    (`scheduler-perf background`, `run --companion`), so unschedulable pods keep arriving
#    while the measured pods are scheduled, as in scheduler_perf.
#  * SchedulingWithMixedChurn: likewise its churn op (every second a node without room, the
#    9-cpu pod and a service created, deleted the next second); it has no init pods.
#  * SchedulingWhileGated: the gated pods and the pods to delete are created, and the
#    scheduler places the latter (step 2; the gated ones stay gated); scheduler_perf's barrier
#    (gated pods attempted) holds as the restarted scheduler meets them at its start. The
#    deletePods op (50 pods a second of those placed) runs next to the measured scheduler as
#    the churn does.
# The schedulers (all with the admin kubeconfig, exempt from API priority and fairness):
#  null            `cluster-bench null-binder`, which binds every pending pod round-robin
#                  without deciding: the API server's ceiling. Only for the workloads whose
#                  pods fit anywhere it puts them (SchedulingBasic, SchedulingPodAffinity and
#                  SchedulingNodeAffinity, whose nodes are all in zone1, the preferred
#                  affinity ones, TopologySpreading and PreferredTopologySpreading, whose
#                  round-robin over the nodes sorted by name spreads evenly); skipped for
#                  SchedulingPodAntiAffinity (it would put two pods on one node),
#                  Unschedulable and SchedulingWithMixedChurn (it would bind the 9-cpu pods
#                  or use the churn nodes without room), SchedulingWhileGated (it would try
#                  the gated pods);
#  gantry          `gantry run`, default profile, leader election off, qps/burst 5000;
#  kube-scheduler  kube-scheduler 1.37.2 (scripts/install-kube.sh), default profile, leader
#                  election off, qps/burst 5000, its /metrics read over HTTPS from its secure
#                  port on loopback (self-signed certificate).
# Results (JSONs, logs, report.md) go to DIR, default target/bench-scheduler-perf/<date>.
# --perf records gantry's measured runs with `perf record` (DIR/<run>/perf.data), with the
# options in PERF_OPTIONS if set. --no-build uses the release binaries as they are. On a
# shared machine, set BENCH_HOLD_FILE to a path: while that file exists, every run waits.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${GANTRY_ROOT}"

WORKLOADS=SchedulingBasic/5000Nodes_10000Pods,SchedulingPodAntiAffinity/5000Nodes_2000Pods,SchedulingPodAffinity/5000Nodes_5000Pods,SchedulingNodeAffinity/5000Nodes_10000Pods,TopologySpreading/5000Nodes_5000Pods,PreferredTopologySpreading/5000Nodes_5000Pods,Unschedulable/5kNodes/100Init/10kPods,SchedulingWhileGated/1Node_10000GatedPods,SchedulingWithMixedChurn/5000Nodes_10000Pods
PARAMS=()
SCHEDULERS=null,gantry,kube-scheduler
ROUNDS=1
OUT=
PERF=
BUILD=1

usage() { bench_usage 8 9; }

while (($#)); do
  bench_option "$@"
  if ((BENCH_SHIFT)); then
    shift "${BENCH_SHIFT}"
    continue
  fi
  case "$1" in
    --workload | --workloads) WORKLOADS=${2:?}; shift 2 ;;
    --param) PARAMS+=(--param "${2:?}"); shift 2 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
[[ "${ROUNDS}" =~ ^[0-9]+$ ]] && ((ROUNDS > 0)) || die "--rounds takes a positive number, not ${ROUNDS}"
IFS=, read -r -a WORKLOAD_LIST <<<"${WORKLOADS}"
IFS=, read -r -a SCHEDULER_LIST <<<"${SCHEDULERS}"
((${#WORKLOAD_LIST[@]} && ${#SCHEDULER_LIST[@]})) ||
  die "--workloads and --schedulers each need at least one value"
for w in "${WORKLOAD_LIST[@]}"; do
  [[ "${w}" == */* ]] || die "--workloads takes TESTCASE/WORKLOAD pairs, not ${w}"
done
for s in "${SCHEDULER_LIST[@]}"; do
  [[ "${s}" == null || "${s}" == gantry || "${s}" == kube-scheduler ]] || die "unknown scheduler ${s}"
done
[[ -z "${PERF}" ]] || command -v perf >/dev/null || die "--perf needs perf (apt-get install linux-perf)"

# scheduler_perf_dir: test/integration/scheduler_perf of the k8s.io/kubernetes module of the
# Kubernetes in use, in Go's module cache (downloaded there through the Go module proxy when
# missing, as install-kube.sh fetches it).
scheduler_perf_dir() {
  local version=${GANTRY_KUBE_VERSION:-${GANTRY_KUBE_DEFAULT_VERSION}} module
  command -v go >/dev/null || die "no Go: the workloads are read from the k8s.io/kubernetes Go module"
  module="$(go env GOMODCACHE)/k8s.io/kubernetes@${version}"
  if [[ ! -d "${module}/test/integration/scheduler_perf" ]]; then
    log "downloading k8s.io/kubernetes@${version} into Go's module cache"
    (cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@${version}") ||
      die "cannot download k8s.io/kubernetes@${version} (is GOPROXY reachable?)"
  fi
  [[ -d "${module}/test/integration/scheduler_perf" ]] || die "no scheduler_perf in ${module}"
  printf '%s\n' "${module}/test/integration/scheduler_perf"
}

# config_of TESTCASE: the performance-config.yaml that defines TESTCASE.
config_of() {
  local file
  file=$(grep -l -x -- "- name: $1" "${PERF_DIR}"/*/performance-config.yaml | head -n 1) ||
    die "no scheduler_perf test case $1 in ${PERF_DIR}"
  printf '%s\n' "${file}"
}

# null_fits TESTCASE: whether the null binder's round-robin is a correct placement of its
# pods (see the header).
null_fits() {
  case "$1" in
    SchedulingBasic | SchedulingPodAffinity | SchedulingNodeAffinity | SchedulingPreferredPodAffinity | \
      SchedulingPreferredPodAntiAffinity | TopologySpreading | PreferredTopologySpreading) return 0 ;;
    *) return 1 ;;
  esac
}

PERF_DIR=$(scheduler_perf_dir)
bench_binaries
bench_out bench-scheduler-perf
bench_machine "scripts/bench-scheduler-perf.sh --workloads ${WORKLOADS} ${PARAMS[*]} --schedulers ${SCHEDULERS} --rounds ${ROUNDS}" \
  "kube-scheduler: $("${KUBE_SCHEDULER}" --version 2>&1)" "scheduler_perf: ${PERF_DIR}"

STATE=
cleanup() {
  if [[ -n "${STATE}" ]]; then
    scripts/control-plane.sh stop "${STATE}" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# clear_namespaces: deletes the pods and events of every namespace of the workload, then
# compacts and defragments etcd.
clear_namespaces() {
  local namespaces=("${PERF_MEASURED_NAMESPACE}") i
  read -r -a others <<<"${PERF_OTHER_NAMESPACES}"
  namespaces+=("${others[@]}")
  for ((i = 0; i < ${#namespaces[@]}; i++)); do
    etcd=()
    ((i < ${#namespaces[@]} - 1)) || etcd=(--etcd "${ETCD_URL}")
    "${BENCH}" clear --kubeconfig "${KUBECONFIG}" --namespace "${namespaces[i]}" "${etcd[@]}"
  done
}

RESULTS=()
for w in "${WORKLOAD_LIST[@]}"; do
  test_case=${w%%/*}
  workload=${w#*/}
  perf=(--config "$(config_of "${test_case}")" --test-case "${test_case}" --workload "${workload}"
    "${PARAMS[@]}")
  plan=$("${BENCH}" scheduler-perf plan "${perf[@]}") || die "${w}: cannot replay it (above)"
  eval "${plan}"
  slug=$(printf '%s' "${w}" | tr '/' '-')
  bench_wait_quiet
  STATE="${OUT}/control-plane-${slug}"
  mkdir -p "${STATE}"
  log "${w}: ${PERF_NODES} nodes: starting the control plane"
  scripts/control-plane.sh start "${STATE}" 2>"${STATE}/control-plane.log"
  # shellcheck source=/dev/null
  . "${STATE}/env"
  perf+=(--kubeconfig "${KUBECONFIG}")
  for word in "${perf[@]}"; do
    # The companion's command line is split at whitespace.
    [[ "${word}" != *[[:space:]]* ]] || die "${w}: words with spaces are not supported: ${word}"
  done
  "${BENCH}" scheduler-perf nodes "${perf[@]}"
  also=()
  for namespace in ${PERF_OTHER_NAMESPACES}; do also+=(--also-namespace "${namespace}"); done
  companion=()
  [[ -z "${PERF_BACKGROUND}" ]] || companion=(--companion "${BENCH} scheduler-perf background ${perf[*]}")
  for ((round = 1; round <= ROUNDS; round++)); do
    suffix=
    ((ROUNDS == 1)) || suffix="-r${round}"
    bench_order "${round}"
    for scheduler in "${ORDER[@]}"; do
      if [[ "${scheduler}" == null ]] && ! null_fits "${test_case}"; then
        log "${w}: the null binder is skipped (its round-robin would place these pods wrongly)"
        continue
      fi
      bench_wait_quiet
      name="${slug}-${scheduler}${suffix}"
      RUN="${OUT}/${name}"
      mkdir -p "${RUN}"
      common=(--kubeconfig "${KUBECONFIG}" --scheduler "${scheduler}" --nodes "${PERF_NODES}"
        --apiserver-pid "${APISERVER_PID}" --etcd-pid "${ETCD_PID}")
      "${BENCH}" scheduler-perf init "${perf[@]}" 2>&1 | tee "${RUN}/populate.log" >&2
      if [[ -n "${PERF_INIT_NAMESPACE}" ]]; then
        init_also=()
        for namespace in ${PERF_OTHER_NAMESPACES}; do
          [[ "${namespace}" == "${PERF_INIT_NAMESPACE}" ]] || init_also+=(--also-namespace "${namespace}")
        done
        port=$("${BENCH}" free-port)
        bench_scheduler_command "${RUN}" "${port}" null-binder
        log "${name}: ${scheduler} places the ${PERF_INIT_PODS} init pods"
        "${BENCH}" run "${common[@]}" --namespace "${PERF_INIT_NAMESPACE}" "${init_also[@]}" \
          --workload "${PERF_NAME} (init)" "${METRICS[@]}" --out "${OUT}/${name}-init.json" \
          --log "${RUN}/scheduler-init.log" -- "${COMMAND[@]}"
        RESULTS+=("${OUT}/${name}-init.json")
      fi
      bench_wait_quiet
      "${BENCH}" scheduler-perf measured "${perf[@]}" 2>&1 | tee -a "${RUN}/populate.log" >&2
      port=$("${BENCH}" free-port)
      bench_scheduler_command "${RUN}" "${port}" null-binder
      extra=(--apiserver-metrics "${RUN}/apiserver-metrics.txt")
      [[ -z "${PERF}" || "${scheduler}" != gantry ]] || extra+=(--perf "${RUN}/perf.data")
      [[ -z "${PERF}" || -z "${PERF_OPTIONS:-}" ]] || extra+=(--perf-options "${PERF_OPTIONS}")
      log "${name}: measuring ${PERF_MEASURED_PODS} pods"
      "${BENCH}" run "${common[@]}" --namespace "${PERF_MEASURED_NAMESPACE}" "${also[@]}" \
        "${companion[@]}" --workload "${PERF_NAME}" "${METRICS[@]}" "${extra[@]}" \
        --out "${OUT}/${name}.json" --log "${RUN}/scheduler.log" -- "${COMMAND[@]}"
      RESULTS+=("${OUT}/${name}.json")
      clear_namespaces
    done
  done
  scripts/control-plane.sh stop "${STATE}" 2>>"${STATE}/control-plane.log"
  rm -rf "${STATE}/etcd"
  STATE=
done
bench_report "${RESULTS[@]}"
