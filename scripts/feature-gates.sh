#!/usr/bin/env bash
# Writes src/bin/gantry/feature_gate_table.rs: the feature gates kube-scheduler of the
# Kubernetes release scripts/install-kube.sh builds accepts, with their defaults and locks at
# that release (read by scripts/feature-gates/main.go from the Kubernetes module itself), each
# marked as a scheduler's gate when kube-scheduler's own code (pkg/scheduler) reads it. Run it
# after moving to another Kubernetes release; not part of .ci/run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

version=${GANTRY_KUBE_VERSION:-${GANTRY_KUBE_DEFAULT_VERSION}}
scripts/install-kube.sh >/dev/null
module="$(kube_cache "${version}")/build/kubernetes"
[[ -r "${module}/go.mod" ]] || die "no Kubernetes build module in ${module}: run scripts/install-kube.sh"
minor=$(sed -E 's/^v([0-9]+\.[0-9]+)\..*/\1/' <<<"${version}")

work=$(mktemp -d)
trap 'rm -rf "${work}" "${module}/cmd-feature-gates"' EXIT
mkdir -p "${module}/cmd-feature-gates"
cp scripts/feature-gates/main.go "${module}/cmd-feature-gates/"
(cd "${module}" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod go run ./cmd-feature-gates "${minor}") >"${work}/gates.tsv"

# The gates kube-scheduler's own code reads, and AllAlpha and AllBeta, which turn such gates
# on: they change what it decides.
sources=$(cd "${module}" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
{
  grep -rhoP '\bfeatures\.[A-Z]\w+' --include='*.go' --exclude='*_test.go' "${sources}/pkg/scheduler" |
    sed 's/^features\.//'
  printf '%s\n' AllAlpha AllBeta
} | sort -u >"${work}/scheduler.txt"

out=src/bin/gantry/feature_gate_table.rs
{
  echo "// The feature gates of kube-scheduler ${version}, written by scripts/feature-gates.sh: do"
  echo "// not edit. Name, default, locked to its default, read by kube-scheduler's own code."
  echo
  echo "/// The gates kube-scheduler accepts, sorted by name."
  echo "pub const GATES: &[Gate] = &["
  while IFS=$'\t' read -r name default locked _stage; do
    scheduler=false
    if grep -qxF "${name}" "${work}/scheduler.txt"; then scheduler=true; fi
    echo "    gate(\"${name}\", ${default}, ${locked}, ${scheduler}),"
  done <"${work}/gates.tsv"
  echo "];"
} >"${out}"
rustfmt --edition 2024 "${out}"
log "wrote ${out}: $(wc -l <"${work}/gates.tsv") gates, $(wc -l <"${work}/scheduler.txt") read by kube-scheduler's code"
