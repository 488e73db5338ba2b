#!/usr/bin/env bash
# make test: starts the local stack if needed, runs every test against it, stops what it started.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if ! "$ROOT/scripts/stack.sh" status 2>/dev/null; then
    trap '"$ROOT/scripts/stack.sh" down' EXIT
fi
# The replica tests read from a streaming standby of the test server.
MEMORY_PG_REPLICA=1 "$ROOT/scripts/stack.sh" up
load_stack_env
cd "$ROOT"
cargo test --workspace "$@"
# The whole suite ends with a short soak of the lifecycle through make run's queues and workers (scripts/soak.sh),
# unless make run is up: the soak would restart its workers with the adversarial model (run `make soak` then).
if [[ $# -eq 0 ]]; then
    if [[ -f "$ROOT/.local/workers.pid" ]] && kill -0 "$(cat "$ROOT/.local/workers.pid")" 2>/dev/null; then
        echo "[test] make run is up: the soak is left out (make soak runs it)" >&2
    else
        SOAK_BATCHES="${SOAK_BATCHES:-12}" "$ROOT/scripts/soak.sh"
        "$ROOT/scripts/run.sh" stop >/dev/null
    fi
fi
