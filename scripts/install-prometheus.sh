#!/usr/bin/env bash
# Provide Prometheus for gantry's node-load integration test (tests/cluster/load.rs), which
# starts its own server on a free loopback port: Debian's `prometheus` package.
# Prints the path of the prometheus binary on stdout (the only output when it is already
# installed), so this works:
#     export GANTRY_PROMETHEUS=$(scripts/install-prometheus.sh)
# Needs root for apt-get (only when prometheus is missing).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LOG_DIR="${GANTRY_ROOT}/.cache/prometheus/logs"
POLICY=/usr/sbin/policy-rc.d

if ! command -v prometheus >/dev/null; then
  [[ ${EUID} -eq 0 ]] || die "installing prometheus needs root (apt-get); run as root or do it by hand"
  mkdir -p "${LOG_DIR}"
  # The package's maintainer scripts would start and enable the system service (on :9090);
  # nothing here needs it. A policy-rc.d that refuses keeps services from starting during
  # the install (Docker images ship one); ours is removed afterwards.
  if [[ ! -e "${POLICY}" ]]; then
    printf '#!/bin/sh\n# Written by gantry scripts/install-prometheus.sh for one install.\nexit 101\n' >"${POLICY}"
    chmod 755 "${POLICY}"
    trap 'rm -f "${POLICY}"' EXIT
  fi
  # A fresh machine may never have fetched the package lists.
  if ! apt-cache show prometheus >/dev/null 2>&1; then
    log "apt-get update"
    run_logged "${LOG_DIR}/apt-update.log" apt-get update
  fi
  log "apt-get install prometheus"
  run_logged "${LOG_DIR}/apt-install.log" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
  command -v prometheus >/dev/null || die "prometheus installed, but no prometheus on PATH"
  log "installed prometheus $(prometheus --version 2>&1 | head -n 1)"
fi
command -v prometheus
