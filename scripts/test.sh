#!/usr/bin/env bash
# make test: starts the local stack if needed, runs every test against it, stops what it started.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if ! "$ROOT/scripts/stack.sh" status 2>/dev/null; then
    trap '"$ROOT/scripts/stack.sh" down' EXIT
fi
"$ROOT/scripts/stack.sh" up
load_stack_env
cd "$ROOT"
cargo test --workspace "$@"
