#!/usr/bin/env bash
# Compares the placements of two gantry binaries through the simulator, for a change meant to
# keep behaviour: the embedded example, the cluster of every scenario of tests/scenarios/ (with
# its configuration), and optionally the openb traces' replay under FGD and gantry's policy.
# Prints one line per case and exits non-zero if any output differs.
#
#   scripts/compare-placements.sh OLD_GANTRY NEW_GANTRY [OPENB_DIR]
#
# OPENB_DIR holds the openb CSV files (openb_node_list_gpu_node.csv, openb_pod_list_*.csv);
# without it the traces are skipped. The outputs are kept in a temporary folder, named at
# the end, for a look at what differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

(($# >= 2)) || { sed -n '7p' "$0" >&2; exit 2; }
old=$1 new=$2 openb=${3:-}
out=$(mktemp -d -t gantry-compare-XXXXXX)
differ=0

# compare NAME ARGS...: runs both binaries with ARGS and compares stdout and exit status,
# leaving out the timings the openb report carries (CPU and wall seconds).
compare() {
  local name=$1
  shift
  local status
  for side in old new; do
    local bin=${old}
    [[ ${side} == new ]] && bin=${new}
    status=0
    "${bin}" "$@" >"${out}/${name}.${side}.raw" 2>"${out}/${name}.${side}.err" || status=$?
    grep -vE '"(cpu|wall)_seconds[a-z_]*":' "${out}/${name}.${side}.raw" >"${out}/${name}.${side}" || true
    echo "exit ${status}" >>"${out}/${name}.${side}"
  done
  if cmp -s "${out}/${name}.old" "${out}/${name}.new"; then
    echo "same       ${name}"
  else
    echo "DIFFERENT  ${name}"
    differ=1
  fi
}

# A scenario's cluster as a List, and its configuration (if any) as a file of its own.
split_scenario() {
  local file=$1 dir=$2
  awk -v dir="${dir}" '
    /^[a-z_]+:/ { section = $1; sub(":", "", section)
                  if (section == "cluster") print "apiVersion: v1\nkind: List\nitems:" > (dir "/cluster.yaml")
                  next }
    section == "cluster" { print > (dir "/cluster.yaml") }
    section == "config"  { sub("^  ", ""); print > (dir "/config.yaml") }
  ' "${file}"
}

compare example simulate --output json

for scenario in tests/scenarios/*.yaml; do
  name=$(basename "${scenario}" .yaml)
  dir="${out}/${name}.input"
  mkdir -p "${dir}"
  split_scenario "${scenario}" "${dir}"
  args=(simulate "${dir}/cluster.yaml" --output json)
  [[ -f "${dir}/config.yaml" ]] && args+=(--config "${dir}/config.yaml")
  compare "${name}" "${args[@]}"
done

if [[ -n "${openb}" ]]; then
  for trace in "${openb}"/openb_pod_list_*.csv; do
    name=openb-$(basename "${trace}" .csv)
    compare "${name}" simulate --openb-nodes "${openb}/openb_node_list_gpu_node.csv" \
      --openb-pods "${trace}" --policy FGD --policy Gantry --seeds 42..43 --jobs 2 --output json
  done
fi

echo "outputs: ${out}"
exit "${differ}"
