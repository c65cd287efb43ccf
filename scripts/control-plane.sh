#!/usr/bin/env bash
# A throw-away Kubernetes control plane on loopback for gantry's integration
# tests, demo and benchmarks: etcd + kube-apiserver, no kubelet. Nodes are
# plain API objects that tests create themselves.
#
#   control-plane.sh start <state-dir>
#       Starts etcd and kube-apiserver on free 127.0.0.1 ports, waits until
#       the apiserver is ready, and writes into <state-dir>:
#         kubeconfig          admin (group system:masters)
#         kubeconfig-gantry   user "gantry", no groups: for RBAC tests
#         env                 KEY=value lines (pids, ports, urls, tokens,
#                             KUBECONFIG, KUBECTL, ...); to use them:
#                             set -a; . <state-dir>/env; set +a
#         *.log               etcd.log, kube-apiserver.log
#       Every start begins with an empty etcd. If <state-dir> already runs
#       a control plane, says so and does nothing.
#   control-plane.sh status <state-dir>    exit 0 if running, 3 if not
#   control-plane.sh stop <state-dir>
#       Stops kube-apiserver and etcd (by recorded pid) and waits for them
#       to exit. Safe to run twice.
#
# The tests start what else runs against it (kube-scheduler for the parity
# check) themselves, through crates/test-support/src/component.rs.
#
# Binaries: from $KUBEBUILDER_ASSETS when it has them, else from the folder
# scripts/install-kube.sh fills (scripts/lib.sh names it).
#
# Fake nodes (no kubelet): a Node's status CAN be set on create, e.g.
#   kubectl create -f node.yaml   # with status.capacity/allocatable/conditions
# keeps it (the node strategy keeps all fields on create, unlike pods).
# Any later UPDATE of the node object silently keeps the old status; change
# status through the status subresource instead:
#   kubectl replace --raw /api/v1/nodes/NAME/status -f node.json
#   curl -X PATCH -H 'Content-Type: application/merge-patch+json' \
#     --data '{"status":{...}}' "$APISERVER_URL/api/v1/nodes/NAME/status" ...
# TaintNodesByCondition admission is off, so a created node gets no
# not-ready taint; with a Ready=True condition it is schedulable at once.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat >&2 <<'EOF'
usage: control-plane.sh start <state-dir>
       control-plane.sh stop <state-dir>
       control-plane.sh status <state-dir>
EOF
  exit 2
}

# ------------------------------------------------------------------ helpers

need_bin() {
  local path
  path=$(kube_bin "$1") || die "no $1 binary in ${KUBEBUILDER_ASSETS:+KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} nor }${GANTRY_KUBE_BIN}; run scripts/install-kube.sh"
  printf '%s\n' "${path}"
}

# Ports of all local TCP sockets in any state, read from /proc so no
# ss/netstat is needed: a port that is listening, or is the local end of
# some connection, is not offered.
declare -A USED_PORTS=()
load_used_ports() {
  local f sl local_addr _
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r "${f}" ]] || continue
    while read -r sl local_addr _; do
      [[ "${sl}" == sl ]] && continue   # header line
      USED_PORTS[$((16#${local_addr##*:}))]=1
    done <"${f}"
  done
}

# free_port VAR: a free loopback port, stored in VAR. Taken below the
# kernel's ephemeral range, where it picks ports for outgoing connections
# (e.g. the apiserver's own connections to etcd), and random so parallel
# starts in different state dirs rarely collide.
free_port() {
  local lo hi p i
  read -r hi _ </proc/sys/net/ipv4/ip_local_port_range
  hi=$((hi - 1)); lo=10000
  ((hi > lo + 1000)) || { lo=1024; hi=65535; }
  for ((i = 0; i < 200; i++)); do
    p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
    if [[ -z "${USED_PORTS[${p}]:-}" ]]; then
      USED_PORTS[${p}]=1
      printf -v "$1" '%s' "${p}"
      return 0
    fi
  done
  die "found no free port between ${lo} and ${hi}"
}

# pid_matches PID: PID is alive and is one of ours. Ours is checked by the
# state dir path that each of our command lines contains, so a recycled
# pid (after a reboot, say) is never killed. Zombies count as gone: in
# some containers nothing reaps orphans.
pid_matches() {
  local pid=$1 stat cmdline
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  stat=$({ cat "/proc/${pid}/stat"; } 2>/dev/null) || return 1
  stat=${stat##*) }   # drop "pid (comm) ": comm may hold spaces
  [[ "${stat:0:1}" != [ZX] ]] || return 1
  cmdline=$({ tr '\0' ' ' <"/proc/${pid}/cmdline"; } 2>/dev/null) || return 1
  [[ "${cmdline}" == *"${STATE}/"* ]]
}

# stop_pid NAME PID: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
  local name=$1 pid=$2 i
  pid_matches "${pid}" || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    pid_matches "${pid}" || return 0
    sleep 0.1
  done
  log "${name} (pid ${pid}) still running 30s after SIGTERM; sending SIGKILL"
  kill -KILL "${pid}" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    pid_matches "${pid}" || return 0
    sleep 0.1
  done
  die "${name} (pid ${pid}) does not exit"
}

# spawn LOG CMD...: start CMD in the background, detached into its own
# session (setsid) so it outlives this script and is not hit by signals
# sent to the caller's terminal or process group. Sets SPAWNED_PID. From a
# non-interactive script the child is no group leader, so setsid execs in
# place and $! is the server's own pid.
spawn() {
  local logfile=$1; shift
  setsid "$@" >"${logfile}" 2>&1 </dev/null &
  SPAWNED_PID=$!
}

# wait_until NAME PID LOG TIMEOUT CHECK...: poll CHECK every 0.2 s until it
# succeeds; fail with the log's tail if the process dies or time runs out.
wait_until() {
  local name=$1 pid=$2 logfile=$3 timeout=$4; shift 4
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    if ! pid_matches "${pid}"; then
      tail -n 30 "${logfile}" >&2 || true
      die "${name} exited during startup; see ${logfile}"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "${logfile}" >&2 || true
      die "${name} not ready after ${timeout}s; see ${logfile}"
    fi
    sleep 0.2
  done
}

etcd_healthy() {
  [[ "$(curl -s --max-time 2 "http://127.0.0.1:${ETCD_CLIENT_PORT}/health" 2>/dev/null)" == *'"health":"true"'* ]]
}

apiserver_ready() {
  [[ "$(curl -sk --max-time 2 -H "Authorization: Bearer ${ADMIN_TOKEN}" \
    "https://127.0.0.1:${APISERVER_PORT}/readyz" 2>/dev/null)" == ok ]]
}

# /readyz does not wait for the bootstrap controller's namespaces, and
# NamespaceLifecycle admission rejects objects in a missing namespace: wait
# for "default" so tests can create pods right away.
default_namespace_exists() {
  [[ "$(curl -sk --max-time 2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${ADMIN_TOKEN}" \
    "https://127.0.0.1:${APISERVER_PORT}/api/v1/namespaces/default" 2>/dev/null)" == 200 ]]
}

# write_kubeconfig FILE USER TOKEN
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gantry
  cluster:
    server: ${APISERVER_URL}
    certificate-authority-data: ${CA_DATA}
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@gantry
  context:
    cluster: gantry
    user: $2
    namespace: default
current-context: $2@gantry
EOF
}

# write_env: the state as KEY=value lines, shell-quoted where needed.
write_env() {
  local var
  {
    for var in GANTRY_STATE_DIR ETCD_PID ETCD_CLIENT_PORT ETCD_PEER_PORT ETCD_URL \
      APISERVER_PID APISERVER_PORT APISERVER_URL ADMIN_TOKEN GANTRY_TOKEN \
      KUBECONFIG GANTRY_KUBECONFIG KUBECTL; do
      printf '%s=%q\n' "${var}" "${!var:-}"
    done
  } >"${STATE}/env.tmp"
  mv "${STATE}/env.tmp" "${STATE}/env"
}

load_env() {
  # shellcheck source=/dev/null
  [[ -r "${STATE}/env" ]] && . "${STATE}/env"
}

running() {
  load_env || return 1
  pid_matches "${ETCD_PID:-}" && pid_matches "${APISERVER_PID:-}"
}

# ------------------------------------------------------------------ commands

cmd_stop() {
  local quiet=${1:-}
  if [[ ! -e "${STATE}/env" ]]; then
    [[ -n "${quiet}" ]] || log "not running in ${STATE}"
    return 0
  fi
  load_env || true
  # apiserver before etcd: it would otherwise log errors about etcd going away.
  stop_pid kube-apiserver "${APISERVER_PID:-}"
  stop_pid etcd "${ETCD_PID:-}"
  rm -f "${STATE}/env"
  [[ -n "${quiet}" ]] || log "stopped control plane in ${STATE}"
}

cmd_start() {
  if running; then
    log "already running in ${STATE}: ${APISERVER_URL} (KUBECONFIG=${KUBECONFIG})"
    return 0
  fi
  # Leftovers of a crashed or half-finished start.
  cmd_stop quiet

  local etcd apiserver
  etcd=$(need_bin etcd)
  apiserver=$(need_bin kube-apiserver)
  # shellcheck disable=SC2034  # written out by write_env via ${!var}
  KUBECTL=$(kube_bin kubectl || true)
  command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"

  # Tokens and keys are secrets: keep everything we write private.
  umask 077
  # Fresh state every start: tests expect an empty cluster.
  rm -rf "${STATE}/etcd" "${STATE}/certs" "${STATE}/auth"
  mkdir -p "${STATE}/certs" "${STATE}/auth"

  # If anything below fails, do not leave half a control plane running.
  trap 'cmd_stop quiet' EXIT

  # shellcheck disable=SC2034  # written out by write_env via ${!var}
  GANTRY_STATE_DIR=${STATE}
  load_used_ports
  free_port ETCD_CLIENT_PORT
  free_port ETCD_PEER_PORT
  free_port APISERVER_PORT
  ETCD_URL="http://127.0.0.1:${ETCD_CLIENT_PORT}"
  APISERVER_URL="https://127.0.0.1:${APISERVER_PORT}"
  KUBECONFIG="${STATE}/kubeconfig"
  GANTRY_KUBECONFIG="${STATE}/kubeconfig-gantry"

  # etcd 3.4 refuses to start on arm64 unless told it is fine.
  [[ "$(uname -m)" != aarch64 ]] || export ETCD_UNSUPPORTED_ARCH=arm64
  # Single member on loopback, plain http (nothing else can reach it).
  spawn "${STATE}/etcd.log" "${etcd}" \
    --name=gantry \
    --data-dir="${STATE}/etcd" \
    --listen-client-urls="${ETCD_URL}" \
    --advertise-client-urls="${ETCD_URL}" \
    --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster="gantry=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster-state=new \
    --logger=zap --log-outputs=stderr
  ETCD_PID=${SPAWNED_PID}
  write_env   # from here on, `stop` can clean up whatever runs
  wait_until etcd "${ETCD_PID}" "${STATE}/etcd.log" 30 etcd_healthy

  # Service-account token signing keys (the apiserver requires them).
  openssl genrsa -out "${STATE}/auth/sa.key" 2048 2>/dev/null
  openssl rsa -in "${STATE}/auth/sa.key" -pubout -out "${STATE}/auth/sa.pub" 2>/dev/null
  # Static bearer tokens: token,user,uid,"groups". system:masters bypasses
  # RBAC; "gantry" has no group beyond system:authenticated, so RBAC tests
  # can grant it exactly what the scheduler needs.
  ADMIN_TOKEN=$(openssl rand -hex 32)
  GANTRY_TOKEN=$(openssl rand -hex 32)
  printf '%s,admin,admin,"system:masters"\n%s,gantry,gantry\n' \
    "${ADMIN_TOKEN}" "${GANTRY_TOKEN}" >"${STATE}/auth/tokens.csv"

  # No --tls-cert-file: the apiserver writes a self-signed CA + serving
  #   cert into --cert-dir (apiserver.crt holds both; SANs include
  #   127.0.0.1), which the kubeconfigs below trust.
  # ServiceAccount admission off: pods need no service account/token;
  # TaintNodesByCondition off: it adds a node.kubernetes.io/not-ready
  #   NoSchedule taint to every new node, and no controller-manager runs
  #   here to remove it; nodes created by tests keep the taints they give.
  # --endpoint-reconciler-type=none: the default reconciler publishes the
  #   advertise address as the "kubernetes" service's endpoint, and the API
  #   rejects loopback endpoint IPs, so it would log an error every 10 s.
  spawn "${STATE}/kube-apiserver.log" "${apiserver}" \
    --etcd-servers="${ETCD_URL}" \
    --advertise-address=127.0.0.1 \
    --bind-address=127.0.0.1 \
    --secure-port="${APISERVER_PORT}" \
    --cert-dir="${STATE}/certs" \
    --token-auth-file="${STATE}/auth/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-key-file="${STATE}/auth/sa.pub" \
    --service-account-signing-key-file="${STATE}/auth/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.0.0.0/24 \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --endpoint-reconciler-type=none
  APISERVER_PID=${SPAWNED_PID}
  write_env
  wait_until kube-apiserver "${APISERVER_PID}" "${STATE}/kube-apiserver.log" 120 apiserver_ready
  wait_until kube-apiserver "${APISERVER_PID}" "${STATE}/kube-apiserver.log" 60 default_namespace_exists

  [[ -s "${STATE}/certs/apiserver.crt" ]] || die "kube-apiserver wrote no ${STATE}/certs/apiserver.crt"
  CA_DATA=$(base64 -w0 <"${STATE}/certs/apiserver.crt")
  write_kubeconfig "${KUBECONFIG}" admin "${ADMIN_TOKEN}"
  write_kubeconfig "${GANTRY_KUBECONFIG}" gantry "${GANTRY_TOKEN}"
  write_env
  trap - EXIT
  log "running: ${APISERVER_URL}, etcd ${ETCD_URL}; KUBECONFIG=${KUBECONFIG}; vars in ${STATE}/env"
}

# ------------------------------------------------------------------ main

(($# >= 2)) || usage
command=$1
[[ -n "$2" ]] || usage
if [[ "${command}" == start ]]; then
  mkdir -p "$2"
fi
if [[ -d "$2" ]]; then
  STATE=$(cd "$2" && pwd -P)
else
  STATE=$2   # stop/status on a dir that never existed: nothing runs there
fi

case "${command}" in
  start) (($# == 2)) || usage; cmd_start ;;
  stop) (($# == 2)) || usage; cmd_stop ;;
  status)
    (($# == 2)) || usage
    if running; then
      log "running in ${STATE}: ${APISERVER_URL}"
    else
      log "not running in ${STATE}"
      exit 3
    fi
    ;;
  *) usage ;;
esac
