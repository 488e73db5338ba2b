#!/usr/bin/env bash
# make run / make stop / make token: the local retrieve API over the local stack.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PID_FILE="$ROOT/.local/retrieve.pid"
BIND="${MEMORY_BIND:-127.0.0.1:8787}"
URL="http://$BIND"

server_running() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

build() {
    echo "[run] building (first build takes several minutes)" >&2
    # The whole workspace, so features unify as in `make test` and the two share one build.
    cargo build --quiet --workspace --bins
}

admin() { "$CARGO_TARGET_DIR/debug/memory-admin" "$@"; }

case "${1:-start}" in
start)
    "$ROOT/scripts/stack.sh" up
    load_stack_env
    build
    admin migrate
    admin seed-demo
    admin ann-indexes
    if server_running; then
        echo "[run] retrieve API already running (pid $(cat "$PID_FILE"))"
    else
        MEMORY_LLM="${MEMORY_LLM:-none}" MEMORY_BIND="$BIND" \
            nohup "$CARGO_TARGET_DIR/debug/retrieve" >"$ROOT/.local/retrieve.log" 2>&1 &
        echo $! >"$PID_FILE"
        for _ in $(seq 1 150); do curl -fsS "$URL/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
        curl -fsS "$URL/healthz" >/dev/null || { echo "[run] server did not come up; see .local/retrieve.log" >&2; exit 1; }
    fi
    echo
    echo "retrieve API: $URL   (logs: .local/retrieve.log)"
    echo "token for the demo coding agent of organisation Acme:"
    echo "  export TOKEN=$(admin token --org 0a000000-0000-4000-8000-000000000001 --agent a1000000-0000-4000-8000-000000000001)"
    ;;
stop)
    if server_running; then kill "$(cat "$PID_FILE")"; echo "[run] stopped the retrieve API"; fi
    rm -f "$PID_FILE"
    "$ROOT/scripts/stack.sh" down
    ;;
token)
    build
    args=(--org "$2")
    [[ -n "${3:-}" ]] && args+=(--agent "$3")
    [[ -n "${4:-}" ]] && args+=(--scope "$4")
    admin token "${args[@]}"
    ;;
*)
    echo "usage: $0 start|stop|token ORG [AGENT] [SCOPE]" >&2
    exit 2
    ;;
esac
