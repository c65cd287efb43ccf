#!/usr/bin/env bash
# Runs gantry's fuzz properties (the proptest tests named fuzz_*, see the README's "Tests")
# for longer than the test command does: PROPTEST_CASES cases each, 100,000 by default instead
# of proptest's 256, in the `fuzz` profile (optimised, with overflow checks and debug
# assertions kept: an overflow is a finding).
#
#   scripts/fuzz.sh                                 # every property
#   PROPTEST_CASES=20000 scripts/fuzz.sh fuzz_sim   # the simulator's only
#
# The first argument, if any, filters the properties by name (default: fuzz_); the others go
# to the test binary. A failure is shrunk and its seed saved under proptest-regressions/:
# commit it, and turn the input into a plain regression test beside the code it broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export PROPTEST_CASES="${PROPTEST_CASES:-100000}"
filter="${1:-fuzz_}"
shift || true
cargo test --profile fuzz --workspace --lib --locked -- "${filter}" "$@"
