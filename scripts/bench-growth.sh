#!/usr/bin/env bash
# Issue 24's measure of how the scheduling core's cost grows with the cluster: `gantry bench`
# for each cluster size and percentageOfNodesToScore in a process of its own, so that the
# peak resident memory the bench prints at its end (VmHWM) is that size's alone.
#
#   scripts/bench-growth.sh [--nodes 1000,5000,15000,50000] [--percentage 0,100]
#       [--pods 3000] [--running-pods N | --running-per-node K] [--workload plain]
#       [--threads 1] [--no-build]
#
# --running-pods N binds N pods round-robin over the nodes before the measured pods (the
# cache holds them as a cluster's running pods), --running-per-node K binds K per node at
# every size; --pods is the measured pods. Prints a Markdown table, one row per process:
# nodes, running pods, percentage, measured pods scheduled, CPU µs per pod, the CPU time
# of the first attempt (which takes the first snapshot of the whole cluster; part of the
# per-pod figure), wall µs per pod, peak RSS in MiB, and the 1-minute load average when the
# row ended (the machine may be shared: CPU time is the steadier figure).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

nodes=1000,5000,15000,50000
percentage=0,100
pods=3000
running=0
per_node=
workload=plain
threads=1
build=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --percentage) percentage=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --running-pods) running=$2; shift 2 ;;
    --running-per-node) per_node=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

cd "$GANTRY_ROOT"
if [[ $build == 1 ]]; then
  log "cargo build --release --bin gantry"
  cargo build --release --bin gantry >&2
fi
gantry=$GANTRY_ROOT/target/release/gantry

echo "| nodes | running pods | workload | pct | threads | pods scheduled | CPU µs/pod | first attempt, CPU ms | wall µs/pod | peak RSS (MiB) | load |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
IFS=, read -ra sizes <<<"$nodes"
IFS=, read -ra pcts <<<"$percentage"
IFS=, read -ra loads <<<"$workload"
IFS=, read -ra thread_counts <<<"$threads"
for n in "${sizes[@]}"; do
  [[ -n $per_node ]] && running=$((per_node * n))
  for w in "${loads[@]}"; do
    for p in "${pcts[@]}"; do
      for t in "${thread_counts[@]}"; do
        log "gantry bench --nodes $n --running-pods $running --pods $pods --workload $w --percentage $p --threads $t"
        out=$("$gantry" bench --nodes "$n" --running-pods "$running" --pods "$pods" \
          --workload "$w" --percentage "$p" --threads "$t")
        load=$(cut -d' ' -f1 /proc/loadavg)
        # The row: nodes running pods workload pct threads record questions pods/s us/pod
        # cpu-us/pod first-cpu-ms scheduled pending; then "peak RSS (VmHWM): X MiB".
        row=$(awk '$1 ~ /^[0-9]+$/ {print; exit}' <<<"$out")
        rss=$(awk '/^peak RSS/ {print $4}' <<<"$out")
        [[ -n $row && -n $rss ]] || die "unexpected output of gantry bench: $out"
        read -r rn rrun _ rw rp rt _ _ _ rwall rcpu rfirst rsched _ <<<"$row"
        echo "| $rn | $rrun | $rw | $rp | $rt | $rsched | $rcpu | $rfirst | $rwall | $rss | $load |"
      done
    done
  done
done
