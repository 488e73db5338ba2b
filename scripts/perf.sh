#!/usr/bin/env bash
# make bench / make eval: run a measurement binary (optimised `perf` profile) against the local stack.
#   scripts/perf.sh memory-bench [flags]   scripts/perf.sh memory-eval --dataset DIR [flags]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$ROOT/scripts/stack.sh" up
load_stack_env
cd "$ROOT"
echo "[perf] building $1 (and the retrieve server it drives) with the perf profile" >&2
cargo build --quiet --profile perf -p memory-tools -p retrieve
binary="$CARGO_TARGET_DIR/perf/$1"
shift
exec "$binary" "$@"
