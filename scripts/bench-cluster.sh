#!/usr/bin/env bash
# Issue 4's end-to-end benchmark: throughput, latency and memory of three schedulers against a
# real (local) kube-apiserver and etcd, on the same synthetic cluster.
#
#   scripts/bench-cluster.sh [--nodes 5000[,N...]] [--pods 10000]
#       [--workload plain,constrained[,gangs]] [--schedulers null,gantry,kube-scheduler]
#       [--null-in-flight N] [--gantry-config FILE] [--coscheduling] [--gang-size 8]
#       [--rounds 1] [--out DIR] [--perf] [--perf-apiserver] [--no-build]
#
# For every cluster size, one control plane, where `cluster-bench populate` creates the nodes
# (32 cpu, 128Gi, 110 pods, Ready, three zones). Then for every round, workload and scheduler:
#  1. `cluster-bench populate` creates a fresh set of pending pods in a namespace of the run's
#     own (100m..2 cpu, 128Mi..2Gi; "constrained": pods of 100 deployments with preferred pod
#     anti-affinity on the hostname and a zone topology spread constraint; "gangs": the plain
#     pods, the same requests, in groups of --gang-size consecutive pods, each group a PodGroup
#     created before its pods, minMember its size and minResources its pods' requests), all
#     with schedulerName default-scheduler, before the scheduler starts;
#  2. `cluster-bench run` waits until the API server and etcd are idle, starts the scheduler,
#     watches the bindings until every pod is bound, reads the scheduler's /metrics, peak RSS
#     (VmHWM) and CPU time, stops it, and checks that every pod is bound once and no node holds
#     more than its allocatable cpu, memory or pods (and, with gangs, that every gang is bound
#     whole or not at all);
#  3. `cluster-bench clear` deletes the run's pods, events and PodGroups, so that every
#     scheduler finds the same empty nodes, and compacts and defragments etcd, so that it
#     finds etcd as small.
# Even rounds take the workloads and the schedulers in the reverse order (the gangs are
# judged against the plain pods, another workload). At the end, `cluster-bench report`
# prints the table, gantry's ratios in every round and issue 4's targets (and for gangs,
# issue 21's: gantry on the gangs at least 0.8 of its throughput on the plain pods).
# The schedulers:
#  null            `cluster-bench null-binder`: binds round-robin, no decision, --null-in-flight
#                  bindings in flight (default: null-binder's --in-flight; what the API
#                  server can bind: the ceiling);
#  gantry          `gantry run`, default profile, leader election off, clientConnection
#                  qps/burst 5000; for gangs, with Coscheduling in place of PrioritySort
#                  (--coscheduling: for every workload);
#  kube-scheduler  kube-scheduler 1.37.2 (scripts/install-kube.sh), default profile, leader
#                  election off, clientConnection qps/burst 5000, its /metrics read over
#                  HTTPS from its secure port on loopback (self-signed certificate).
# All use the admin kubeconfig (system:masters: exempt from API priority and fairness).
# kube-scheduler 1.37.2 ignores the PodGroups of deploy/05-podgroup-crd.yaml
# (scheduling.x-k8s.io, Coscheduling's; its own gang scheduling, behind the GenericWorkload
# gate, off by default, reads scheduling.k8s.io's) and the null binder decides nothing: they
# would place the gangs' pods as plain ones, so only gantry runs the gangs workload. The
# PodGroup CRD (deploy/05-podgroup-crd.yaml) is installed when gangs are asked for.
#
# --rounds N repeats the whole set N times, one round after the other: the speed of a shared
# machine drifts by a third over minutes, so a ratio means most between the runs of one
# round, and the report judges the targets on the median of the rounds' ratios (and says
# how many rounds hold on their own).
# Results (one JSON per run, logs, report.md) go to DIR, default
# target/bench-cluster/<date>. --gantry-config runs gantry with another configuration (to
# compare settings; its profile must serve default-scheduler; it replaces the Coscheduling
# profile of the gangs too). --perf records gantry with `perf record`, with the default
# options of `cluster-bench run --perf-options` (DIR/<run>/perf.data; $PERF_OPTIONS replaces those options). --perf-apiserver records
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
COSCHEDULING=
GANG_SIZE=8
OUT=
PERF=
PERF_APISERVER=
# `perf record` options for --perf instead of cluster-bench run's; e.g.
# PERF_OPTIONS="-e cpu-clock -F 500 --call-graph dwarf" gives call chains through code built
# without frame pointers.
PERF_OPTIONS=${PERF_OPTIONS:-}
BUILD=1

usage() { bench_usage 5 8; }

while (($#)); do
  bench_option "$@"
  if ((BENCH_SHIFT)); then
    shift "${BENCH_SHIFT}"
    continue
  fi
  case "$1" in
    --workload | --workloads) WORKLOADS=${2:?}; shift 2 ;;
    --null-in-flight) NULL_IN_FLIGHT=${2:?}; shift 2 ;;
    --gantry-config) GANTRY_CONFIG=${2:?}; shift 2 ;;
    --coscheduling) COSCHEDULING=1; shift ;;
    --gang-size) GANG_SIZE=${2:?}; shift 2 ;;
    --perf-apiserver) PERF_APISERVER=1; shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
IFS=, read -r -a NODE_LIST <<<"${NODES}"
IFS=, read -r -a WORKLOAD_LIST <<<"${WORKLOADS}"
IFS=, read -r -a SCHEDULER_LIST <<<"${SCHEDULERS}"
((${#NODE_LIST[@]} && ${#WORKLOAD_LIST[@]} && ${#SCHEDULER_LIST[@]})) ||
  die "--nodes, --workload and --schedulers each need at least one value"
GANGS=
for w in "${WORKLOAD_LIST[@]}"; do
  [[ "${w}" == plain || "${w}" == constrained || "${w}" == gangs ]] || die "unknown workload ${w}"
  [[ "${w}" != gangs ]] || GANGS=1
done
[[ "${GANG_SIZE}" =~ ^[1-9][0-9]*$ ]] || die "--gang-size takes a positive number, not ${GANG_SIZE}"
for s in "${SCHEDULER_LIST[@]}"; do
  [[ "${s}" == null || "${s}" == gantry || "${s}" == kube-scheduler ]] || die "unknown scheduler ${s}"
done
[[ -z "${PERF}${PERF_APISERVER}" ]] || command -v perf >/dev/null || die "--perf needs perf (apt-get install linux-perf)"

bench_binaries
bench_out bench-cluster
gangs_options=
[[ -z "${GANGS}" ]] || gangs_options=" --gang-size ${GANG_SIZE}"
bench_machine "scripts/bench-cluster.sh --nodes ${NODES} --pods ${PODS} --workload ${WORKLOADS} --schedulers ${SCHEDULERS}${NULL_IN_FLIGHT:+ --null-in-flight ${NULL_IN_FLIGHT}} --rounds ${ROUNDS}${GANTRY_CONFIG:+ --gantry-config ${GANTRY_CONFIG}}${COSCHEDULING:+ --coscheduling}${gangs_options}"

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
  bench_wait_quiet
  STATE="${OUT}/control-plane-${nodes}n"
  mkdir -p "${STATE}"
  log "${nodes} nodes: starting the control plane"
  scripts/control-plane.sh start "${STATE}" 2>"${STATE}/control-plane.log"
  # shellcheck source=/dev/null
  . "${STATE}/env"
  # shellcheck disable=SC2153  # KUBECTL and KUBECONFIG come from the control plane's env
  [[ -z "${GANGS}" ]] || install_podgroup_crd "${KUBECTL}" "${KUBECONFIG}"
  "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --nodes "${nodes}"
  for ((round = 1; round <= ROUNDS; round++)); do
    suffix=
    ((ROUNDS == 1)) || suffix="-r${round}"
    bench_order "${round}"
    workloads=("${WORKLOAD_LIST[@]}")
    if ((round % 2 == 0)); then
      workloads=()
      for ((i = ${#WORKLOAD_LIST[@]} - 1; i >= 0; i--)); do workloads+=("${WORKLOAD_LIST[i]}"); done
    fi
    for workload in "${workloads[@]}"; do
      for scheduler in "${ORDER[@]}"; do
        if [[ "${workload}" == gangs && "${scheduler}" != gantry ]]; then
          log "${scheduler} ignores PodGroups: not run on the gangs"
          continue
        fi
        bench_wait_quiet
        name="${nodes}n-${PODS}p-${workload}-${scheduler}${suffix}"
        RUN="${OUT}/${name}"
        namespace="${workload}-${scheduler}${suffix}"
        mkdir -p "${RUN}"
        "${BENCH}" populate --kubeconfig "${KUBECONFIG}" --pods "${PODS}" \
          --workload "${workload}" --gang-size "${GANG_SIZE}" --namespace "${namespace}"
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
            elif [[ -n "${COSCHEDULING}" || "${workload}" == gangs ]]; then
              bench_gantry_config "${RUN}/gantry.yaml" coscheduling
            else
              bench_gantry_config "${RUN}/gantry.yaml"
            fi
            command=("${GANTRY}" run --config "${RUN}/gantry.yaml" --kubeconfig "${KUBECONFIG}"
              --address "127.0.0.1:${port}" --secure-port 0)
            [[ -z "${PERF}" ]] || extra+=(--perf "${RUN}/perf.data")
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
bench_report "${RESULTS[@]}"
