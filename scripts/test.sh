#!/usr/bin/env bash
# Runs every test of gantry: unit tests, the scenario suite, the scenario suite checked against
# the real kube-scheduler (tests/kube_scheduler_parity.rs), and the integration tests against a
# real kube-apiserver and etcd (and, for node load, a real Prometheus; where a controller takes
# part, the real kube-controller-manager), all of the Kubernetes scripts/install-kube.sh builds.
# Safe on a fresh machine: installs what the tests need first (scripts/install-kube.sh,
# scripts/install-prometheus.sh), and fails if an install fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Assigned apart from `export`: `export VAR="$(cmd)"` would hide cmd's failure from set -e.
# A KUBEBUILDER_ASSETS given by the caller is kept: the tests and scripts take each binary
# from it when it has one and from install-kube.sh's folder otherwise.
kube_bin=$(scripts/install-kube.sh)
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-${kube_bin}}"
prometheus_bin=$(scripts/install-prometheus.sh)
export GANTRY_PROMETHEUS="${GANTRY_PROMETHEUS:-${prometheus_bin}}"

cargo test --workspace --all-targets --locked "$@"
