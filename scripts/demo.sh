#!/usr/bin/env bash
# gantry's demo: a real (local) Kubernetes control plane with the PersistentVolume
# controller, the simulator's example cluster (23 nodes over three zones, running pods, and a
# pending workload with pods that cannot be placed, a StatefulSet on local volumes among
# them) created in it, and `gantry run` scheduling it. Prints where every pod went and why
# the pending ones are pending, then stops everything.
#
#   scripts/demo.sh
#
# Needs what scripts/install-kube.sh provides (it runs first, and is quiet once everything
# is in place) and a Rust toolchain (gantry is built in release mode).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${GANTRY_ROOT}"

# install-kube.sh prints the folder it fills; binaries already in KUBEBUILDER_ASSETS win.
kube_bin_dir=$(scripts/install-kube.sh)
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-${kube_bin_dir}}"
log "building gantry (release)"
cargo build --release --quiet --bin gantry
GANTRY="${GANTRY_ROOT}/target/release/gantry"

STATE=$(mktemp -d -t gantry-demo.XXXXXX)
GANTRY_PID=
KCM_PID=
cleanup() {
  if [[ -n "${GANTRY_PID}" ]] && kill -0 "${GANTRY_PID}" 2>/dev/null; then
    kill -TERM "${GANTRY_PID}" 2>/dev/null || true
    wait "${GANTRY_PID}" 2>/dev/null || true
  fi
  if [[ -n "${KCM_PID}" ]] && kill -0 "${KCM_PID}" 2>/dev/null; then
    kill -TERM "${KCM_PID}" 2>/dev/null || true
    wait "${KCM_PID}" 2>/dev/null || true
  fi
  scripts/control-plane.sh stop "${STATE}" >/dev/null 2>&1 || true
  rm -rf "${STATE}"
}
trap cleanup EXIT

log "starting etcd and kube-apiserver in ${STATE}"
scripts/control-plane.sh start "${STATE}"
set -a
# shellcheck source=/dev/null
. "${STATE}/env"
set +a
k() { "${KUBECTL}" --kubeconfig "${KUBECONFIG}" "$@"; }

# The example gives pods a `priority`, which the API server takes only from a PriorityClass:
# each value becomes a class.
EXAMPLE=crates/sim/src/example.yaml
for value in $(grep -oE '^ +priority: [0-9]+$' "${EXAMPLE}" | awk '{print $2}' | sort -u); do
  k apply -f - >/dev/null <<EOF
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: demo-priority-${value}
value: ${value}
EOF
done
if ! sed -E 's/^( +)priority: ([0-9]+)$/\1priorityClassName: demo-priority-\2/' "${EXAMPLE}" \
  | k apply --validate=false -f - >"${STATE}/apply.log" 2>&1; then
  cat "${STATE}/apply.log" >&2
  die "cannot create the example cluster"
fi
log "created $(k get nodes --no-headers | wc -l) nodes and $(k get pods -A --no-headers | wc -l) pods"

# The PersistentVolume controller completes the volume bindings gantry makes for the
# example's StatefulSet (kube-controller-manager with that controller only; no HTTP port).
log "starting the PersistentVolume controller (log: ${STATE}/kube-controller-manager.log)"
start_pv_controller "${KUBECONFIG}" "${STATE}/kube-controller-manager.log" --pvclaimbinder-sync-period=1s
KCM_PID=${PV_CONTROLLER_PID}
# A new volume is Pending until the controller has looked at it; gantry binds Available ones.
deadline=$((SECONDS + 30))
until [[ -z "$(k get pv -o jsonpath='{range .items[?(@.status.phase!="Available")]}{.metadata.name}{"\n"}{end}')" ]]; do
  kill -0 "${KCM_PID}" 2>/dev/null || { cat "${STATE}/kube-controller-manager.log" >&2; die "kube-controller-manager exited"; }
  ((SECONDS < deadline)) || die "volumes not Available after 30 s; see ${STATE}/kube-controller-manager.log"
  sleep 0.5
done

# Pods that already run (they have a node in the example) are not gantry's to place.
RUNNING=$(k get pods -A -o jsonpath='{range .items[?(@.spec.nodeName)]}{.metadata.namespace}/{.metadata.name} {end}')

# No kube-scheduler runs here, so gantry serves the default profile (default-scheduler).
cat >"${STATE}/gantry.yaml" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
EOF
log "starting gantry run (log: ${STATE}/gantry.log)"
"${GANTRY}" run --config "${STATE}/gantry.yaml" --kubeconfig "${KUBECONFIG}" \
  --address 127.0.0.1:0 --secure-port 0 2>"${STATE}/gantry.log" &
GANTRY_PID=$!

# Done when every pod is bound or gantry has marked it PodScheduled=False.
undecided() {
  k get pods -A -o jsonpath='{range .items[*]}{.spec.nodeName}{"|"}{.status.conditions[?(@.type=="PodScheduled")].status}{"\n"}{end}' \
    | awk -F'|' '$1 == "" && $2 != "False"' | wc -l
}
deadline=$((SECONDS + 60))
while (($(undecided) > 0)); do
  kill -0 "${GANTRY_PID}" 2>/dev/null || { cat "${STATE}/gantry.log" >&2; die "gantry exited"; }
  ((SECONDS < deadline)) || die "pods still undecided after 60 s; see ${STATE}/gantry.log"
  sleep 0.5
done

pods=$(k get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace}{"|"}{.metadata.name}{"|"}{.spec.nodeName}{"|"}{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}')
echo
echo "Where every pod went:"
printf '%s\n' "${pods}" | awk -F'|' -v running=" ${RUNNING}" '
  BEGIN { printf "%-10s %-20s %s\n", "NAMESPACE", "POD", "NODE" }
  $3 != "" {
    note = index(running, " " $1 "/" $2 " ") ? "   (already running)" : ""
    printf "%-10s %-20s %s%s\n", $1, $2, $3, note
  }'
echo
echo "Pending pods, and why (gantry's FailedScheduling message, also their PodScheduled condition):"
printf '%s\n' "${pods}" | awk -F'|' '
  BEGIN { printf "%-10s %-20s %s\n", "NAMESPACE", "POD", "WHY" }
  $3 == "" { printf "%-10s %-20s %s\n", $1, $2, $4 }'
echo
address=$(grep -oE 'served=[0-9.:]+' "${STATE}/gantry.log" | head -n 1 | cut -d= -f2)
if [[ -n "${address}" ]]; then
  echo "gantry's metrics (http://${address}/metrics):"
  curl -s "http://${address}/metrics" | grep -E '^scheduler_schedule_attempts_total' || true
fi
kill -TERM "${GANTRY_PID}"
wait "${GANTRY_PID}" || die "gantry did not stop cleanly; see ${STATE}/gantry.log"
GANTRY_PID=
echo
echo "Compare with the simulator on the same cluster: cargo run --release -- simulate"
