#!/usr/bin/env bash
# Issue 19's volume benchmark: kube-scheduler's own scheduler_perf workloads with volumes
# (Kubernetes 1.37.2, test/integration/scheduler_perf/volumes/performance-config.yaml:
# SchedulingInTreePVs, SchedulingCSIPVs, SchedulingMigratedInTreePVs), gantry against
# kube-scheduler 1.37.2 side by side, through a real (local) kube-apiserver and etcd with the
# real PersistentVolume controller running.
#
#   scripts/bench-volumes.sh [--nodes 5000] [--init-pods N] [--pods 1000]
#       [--workload in-tree,csi,migrated] [--schedulers gantry,kube-scheduler[,null]]
#       [--rounds 1] [--out DIR] [--perf] [--no-build]
#
# The workloads, with scheduler_perf's node and pod templates (see
# src/bin/cluster-bench/volumes.rs):
#  in-tree   (SchedulingInTreePVs)          every pod has a claim of its own on an in-tree
#            AWS EBS volume; the nodes (scheduler_perf's base node, as node-default.yaml:
#            4 cpu, 32Gi, 110 pods, Ready) have no CSINode;
#  csi       (SchedulingCSIPVs)              the volumes are EBS CSI volumes; every node has
#            the allocatable attachable-volumes-csi-ebs.csi.aws.com 39 and a CSINode with
#            the driver ebs.csi.aws.com and 39 volumes;
#  migrated  (SchedulingMigratedInTreePVs)   in-tree AWS EBS volumes on the csi nodes, whose
#            CSINodes say the in-tree plugin is migrated to the CSI driver (the AWS EBS
#            migration is always on in kube-scheduler 1.37, which has no gate for it, as in
#            gantry).
# Counts as in scheduler_perf: --init-pods (default: as many as nodes; its 500Nodes and
# 5000Nodes workloads) and --pods measured pods (1000), one claim and one volume each (its
# 5000Nodes_2000Pods, in-tree, is --nodes 5000 --init-pods 1000 --pods 2000, and
# 5000Nodes_5000Pods, CSI and migrated, --nodes 5000 --pods 5000).
#
# For every workload, one control plane (the nodes differ), and kube-controller-manager 1.37.2
# with only the PV binder controller (--kube-api-qps/burst 5000; its log in
# DIR/control-plane-<workload>/kube-controller-manager.log), started once and running
# through every measurement. `cluster-bench populate` creates the nodes (and CSINodes). Then
# for every round and scheduler:
#  1. `cluster-bench populate` creates, in a namespace of the run's own, each pod's volume
#     (pre-bound to its claim), its claim (naming the volume) and the pod, pending, with
#     schedulerName default-scheduler, and waits until the PV controller has bound every
#     claim (it says how long that took), so that what is measured is the scheduler;
#  2. `cluster-bench run` waits until the API server and etcd are idle, starts the scheduler,
#     watches the bindings until every pod is bound, reads the scheduler's /metrics, peak RSS
#     and CPU time, stops it, and checks that every pod is bound once, no node holds more
#     than its allocatable, and every claim is Bound to its volume and that volume Bound to
#     the claim (its claimRef with the claim's uid);
#  3. `cluster-bench clear` deletes the run's pods, events, claims and volumes (removing the
#     protection finalizers, whose controllers do not run here) and compacts and defragments
#     etcd.
# Even rounds take the schedulers in the reverse order. At the end, `cluster-bench report`
# prints the table, gantry's ratio to kube-scheduler in every round, and issue 19's target
# (five times kube-scheduler's throughput, every pod bound with its volume) judged on the
# median of the rounds.
#
# Two deviations from scheduler_perf, both for the real control plane:
#  * scheduler_perf creates the claims and volumes bound already (both phases Bound, the
#    claim's bind-completed annotation, the volume's claimRef without the claim's uid), with
#    no PV controller running; the real one would mark such a claim Lost (its volume names
#    another claimant: no uid). Here each pair is pre-bound the way a user does it (the
#    volume's claimRef names the claim without a uid, the claim's spec.volumeName names the
#    volume, no annotation, no status) and the PV controller binds them before the scheduler
#    starts.
#  * scheduler_perf creates its measured pods while the scheduler runs, so its figure is
#    bounded by how fast it creates them. Here all the pods (init and measured) are pending
#    before the scheduler starts, as in scripts/bench-cluster.sh; the throughput is from the
#    scheduler's start to the last binding, and the report also gives the rate of the last
#    --pods bindings (the measured pods' share, placed after the init pods: their names sort
#    after the init pods', so both schedulers queue them last).
# The schedulers (all with the admin kubeconfig, exempt from API priority and fairness):
#  gantry          `gantry run`, default profile, leader election off, qps/burst 5000;
#  kube-scheduler  kube-scheduler 1.37.2 (scripts/install-kube.sh), default profile, leader
#                  election off, qps/burst 5000, its /metrics read over HTTPS from its secure
#                  port on loopback (self-signed certificate);
#  null            `cluster-bench null-binder`, which binds round-robin without deciding
#                  (not by default: the claims are bound already, so it measures only the
#                  API server's ceiling, as in bench-cluster.sh).
# Results (one JSON per run, logs, report.md) go to DIR, default
# target/bench-volumes/<date>. --perf records gantry with `perf record` (DIR/<run>/perf.data),
# with the options of `perf record` in PERF_OPTIONS if set (default `-e cpu-clock -g`;
# `-e cpu-clock --call-graph dwarf` gives call chains from the release build, which has no
# frame pointers).
# --no-build uses the release binaries as they are. On a shared machine, set
# BENCH_HOLD_FILE to a path: while that file exists, every run waits.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${GANTRY_ROOT}"

NODES=5000
INIT_PODS=
PODS=1000
WORKLOADS=in-tree,csi,migrated
SCHEDULERS=gantry,kube-scheduler
ROUNDS=1
OUT=
PERF=
BUILD=1

usage() { bench_usage 8 10; }

while (($#)); do
  bench_option "$@"
  if ((BENCH_SHIFT)); then
    shift "${BENCH_SHIFT}"
    continue
  fi
  case "$1" in
    --init-pods) INIT_PODS=${2:?}; shift 2 ;;
    --workload | --workloads) WORKLOADS=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
INIT_PODS=${INIT_PODS:-${NODES}}
for n in "${NODES}" "${INIT_PODS}" "${PODS}" "${ROUNDS}"; do
  [[ "${n}" =~ ^[0-9]+$ ]] || die "--nodes, --init-pods, --pods and --rounds take a number, not ${n}"
done
((NODES > 0 && PODS > 0 && ROUNDS > 0)) || die "--nodes, --pods and --rounds must be positive"
TOTAL_PODS=$((INIT_PODS + PODS))
IFS=, read -r -a WORKLOAD_LIST <<<"${WORKLOADS}"
IFS=, read -r -a SCHEDULER_LIST <<<"${SCHEDULERS}"
((${#WORKLOAD_LIST[@]} && ${#SCHEDULER_LIST[@]})) ||
  die "--workload and --schedulers each need at least one value"
for w in "${WORKLOAD_LIST[@]}"; do
  [[ "${w}" == in-tree || "${w}" == csi || "${w}" == migrated ]] || die "unknown workload ${w}"
done
for s in "${SCHEDULER_LIST[@]}"; do
  [[ "${s}" == null || "${s}" == gantry || "${s}" == kube-scheduler ]] || die "unknown scheduler ${s}"
done
[[ -z "${PERF}" ]] || command -v perf >/dev/null || die "--perf needs perf (apt-get install linux-perf)"

# cluster-bench's name of a workload.
bench_workload() {
  case "$1" in
    in-tree) echo in-tree-pvs ;;
    csi) echo csi-pvs ;;
    migrated) echo migrated-in-tree-pvs ;;
  esac
}

bench_binaries
KCM=$(kube_bin kube-controller-manager) || die "no kube-controller-manager binary"
bench_out bench-volumes
bench_machine "scripts/bench-volumes.sh --nodes ${NODES} --init-pods ${INIT_PODS} --pods ${PODS} --workload ${WORKLOADS} --schedulers ${SCHEDULERS} --rounds ${ROUNDS}" \
  "kube-scheduler: $("${KUBE_SCHEDULER}" --version 2>&1)" \
  "kube-controller-manager: $("${KCM}" --version 2>&1)"

STATE=
PV_CONTROLLER_PID=
stop_pv_controller() {
  if [[ -n "${PV_CONTROLLER_PID}" ]] && kill -0 "${PV_CONTROLLER_PID}" 2>/dev/null; then
    kill -TERM "${PV_CONTROLLER_PID}" 2>/dev/null || true
    wait "${PV_CONTROLLER_PID}" 2>/dev/null || true
  fi
  PV_CONTROLLER_PID=
}
cleanup() {
  stop_pv_controller
  if [[ -n "${STATE}" ]]; then
    scripts/control-plane.sh stop "${STATE}" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# Dies when the PV controller has exited (a run without it would wait for bindings forever).
pv_controller_running() {
  kill -0 "${PV_CONTROLLER_PID}" 2>/dev/null && return 0
  tail -n 30 "${STATE}/kube-controller-manager.log" >&2 || true
  die "kube-controller-manager exited; see ${STATE}/kube-controller-manager.log"
}

RESULTS=()
for w in "${WORKLOAD_LIST[@]}"; do
  workload=$(bench_workload "${w}")
  bench_wait_quiet
  STATE="${OUT}/control-plane-${workload}"
  mkdir -p "${STATE}"
  log "${workload}, ${NODES} nodes: starting the control plane and the PV controller"
  scripts/control-plane.sh start "${STATE}" 2>"${STATE}/control-plane.log"
  # shellcheck source=/dev/null
  . "${STATE}/env"
  # shellcheck disable=SC2153  # KUBECONFIG comes from the control plane's env
  start_pv_controller "${KUBECONFIG}" "${STATE}/kube-controller-manager.log" \
    --kube-api-qps=5000 --kube-api-burst=5000
  "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --nodes "${NODES}" --workload "${workload}"
  for ((round = 1; round <= ROUNDS; round++)); do
    suffix=
    ((ROUNDS == 1)) || suffix="-r${round}"
    bench_order "${round}"
    for scheduler in "${ORDER[@]}"; do
      bench_wait_quiet
      pv_controller_running
      name="${NODES}n-${TOTAL_PODS}p-${workload}-${scheduler}${suffix}"
      RUN="${OUT}/${name}"
      namespace="${workload}-${scheduler}${suffix}"
      mkdir -p "${RUN}"
      "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --pods "${TOTAL_PODS}" \
        --workload "${workload}" --namespace "${namespace}" 2>&1 | tee "${RUN}/populate.log" >&2
      port=$("${BENCH}" free-port)
      metrics=(--metrics "http://127.0.0.1:${port}/metrics")
      extra=(--apiserver-metrics "${RUN}/apiserver-metrics.txt")
      case "${scheduler}" in
        null)
          metrics=()
          command=("${BENCH}" null-binder --kubeconfig "${KUBECONFIG}")
          ;;
        gantry)
          bench_gantry_config "${RUN}/gantry.yaml"
          command=("${GANTRY}" run --config "${RUN}/gantry.yaml" --kubeconfig "${KUBECONFIG}"
            --address "127.0.0.1:${port}" --secure-port 0)
          [[ -z "${PERF}" ]] || extra+=(--perf "${RUN}/perf.data")
          [[ -z "${PERF}" || -z "${PERF_OPTIONS:-}" ]] || extra+=(--perf-options "${PERF_OPTIONS}")
          ;;
        kube-scheduler)
          bench_kube_scheduler_config "${RUN}/kube-scheduler.yaml" "${KUBECONFIG}"
          bench_kube_scheduler_command "${RUN}/kube-scheduler.yaml" "${KUBECONFIG}" "${port}"
          command=("${KUBE_SCHEDULER_COMMAND[@]}")
          metrics=(--metrics "https://127.0.0.1:${port}/metrics")
          ;;
      esac
      log "${name}: measuring"
      "${BENCH}" run --kubeconfig "${KUBECONFIG}" --namespace "${namespace}" \
        --scheduler "${scheduler}" --workload "${workload}" --nodes "${NODES}" --tail "${PODS}" \
        "${metrics[@]}" "${extra[@]}" --apiserver-pid "${APISERVER_PID}" --etcd-pid "${ETCD_PID}" \
        --out "${OUT}/${name}.json" --log "${RUN}/scheduler.log" -- "${command[@]}"
      RESULTS+=("${OUT}/${name}.json")
      "${BENCH}" clear --kubeconfig "${KUBECONFIG}" --namespace "${namespace}" --etcd "${ETCD_URL}"
    done
  done
  stop_pv_controller
  scripts/control-plane.sh stop "${STATE}" 2>>"${STATE}/control-plane.log"
  rm -rf "${STATE}/etcd"
  STATE=
done
bench_report "${RESULTS[@]}"
