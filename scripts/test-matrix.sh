#!/usr/bin/env bash
# Runs the integration tests (tests/cluster/) against the oldest Kubernetes gantry supports,
# as scripts/test.sh runs them against the newest: install-kube.sh builds that release into a
# cache of its own (10 to 20 minutes the first time). Not part of .ci/run; the README keeps its
# last result.
#
#   scripts/test-matrix.sh [VERSION]     VERSION: a Kubernetes release, v1.35.4 by default
#
# Arguments after VERSION go to cargo test (`-- --test-threads 1`, say).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The oldest minor of the three upstream supports, at the newest patch the Go module proxy
# serves.
OLDEST=v1.35.4
version=${1:-${OLDEST}}
(($# == 0)) || shift

# As scripts/test.sh: assigned apart from `export`, so that a failed install stops here.
kube_bin=$(GANTRY_KUBE_VERSION="${version}" scripts/install-kube.sh)
prometheus_bin=$(scripts/install-prometheus.sh)
export KUBEBUILDER_ASSETS="${kube_bin}" GANTRY_PROMETHEUS="${prometheus_bin}"
echo "test-matrix.sh: integration tests against $("${kube_bin}/kube-apiserver" --version)" >&2
cargo test --locked --no-fail-fast --test cluster "$@"
