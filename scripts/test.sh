#!/usr/bin/env bash
# Runs every test of gantry: unit tests, the scenario suite, and the integration tests
# against a real kube-apiserver and etcd (built or found by scripts/install-kube.sh).
# Safe on a fresh machine: installs what the tests need first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo test --all-targets --locked "$@"
