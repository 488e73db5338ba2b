#!/usr/bin/env bash
# make run / make stop / make scan / make events / make import-repo / make admin / make psql / make token: the local
# retrieve API and workers over the local stack.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The address kept in .local/stack.env (MEMORY_BIND given to `make run` once), unless given now.
if [[ -z "${MEMORY_BIND:-}" && -f "$ROOT/.local/stack.env" ]]; then
    MEMORY_BIND="$(sed -n 's/^export MEMORY_BIND=//p' "$ROOT/.local/stack.env")"
fi
BIND="${MEMORY_BIND:-127.0.0.1:8787}"
URL="http://$BIND"

running() { [[ -f "$ROOT/.local/$1.pid" ]] && kill -0 "$(cat "$ROOT/.local/$1.pid")" 2>/dev/null; }

build() {
    echo "[run] building (first build takes several minutes)" >&2
    # The whole workspace, so features unify as in `make test` and the two share one build.
    cargo build --quiet --workspace --bins
}

# memory-admin as make run built it (the workspace's features: no second build), built first if it is missing.
admin() {
    [[ -x "$CARGO_TARGET_DIR/debug/memory-admin" ]] || build
    "$CARGO_TARGET_DIR/debug/memory-admin" "$@"
}

# Starts a binary in the background unless it runs; its log and pid live in .local/.
start() {
    local name="$1"
    shift
    if running "$name"; then
        echo "[run] $name already running (pid $(cat "$ROOT/.local/$name.pid"))"
    else
        nohup "$@" >"$ROOT/.local/$name.log" 2>&1 &
        echo $! >"$ROOT/.local/$name.pid"
    fi
}

stop() {
    local name="$1"
    if running "$name"; then kill "$(cat "$ROOT/.local/$name.pid")"; echo "[run] stopped $name"; fi
    rm -f "$ROOT/.local/$name.pid"
}

# The services' environment for local runs: no Bedrock (rule-based fallbacks, the offline stand-in for the
# workers' model), checkouts for the file scan under .local/repos.
local_env() {
    export MEMORY_LLM="${MEMORY_LLM:-none}" MEMORY_BIND="$BIND" MEMORY_AUTH="${MEMORY_AUTH:-local-jwt}"
    export MEMORY_REPOS_DIR="${MEMORY_REPOS_DIR:-$ROOT/.local/repos}"
    mkdir -p "$MEMORY_REPOS_DIR"
}

# The demo repository (tools/demo-repo, committed as the checkout of Acme's project that the file scan reads),
# imported through the ingest queue: one anchored memory per chunk. Importing it again changes nothing.
ACME=0a000000-0000-4000-8000-000000000001
ACME_PROJECT=1a000000-0000-4000-8000-000000000001
import_demo_repository() {
    local checkout="$MEMORY_REPOS_DIR/$ACME/$ACME_PROJECT"
    if [[ ! -d "$checkout/.git" ]]; then
        mkdir -p "$checkout"
        cp -r "$ROOT/tools/demo-repo/." "$checkout/"
        git -C "$checkout" init -q -b main
        git -C "$checkout" add -A
        git -C "$checkout" -c user.name=demo -c user.email=demo@example.com -c commit.gpgsign=false commit -q -m "auth-service"
    fi
    admin import-repo --org "$ACME" --project "$ACME_PROJECT" --name auth-service >/dev/null
    echo "[run] demo repository auth-service imported from $checkout (edit, commit, then make scan)"
}

case "${1:-start}" in
start)
    "$ROOT/scripts/stack.sh" up
    load_stack_env
    build
    admin migrate
    admin seed-demo
    # The local tools' sender may write into the demo organisations (the ingest worker checks every sender).
    for org in 0a000000-0000-4000-8000-000000000001 0b000000-0000-4000-8000-000000000002; do
        admin producers add --org "$org" --sender "$MEMORY_LOCAL_SENDER_ID" --max-trust verified --name local-tools \
            --imports --forgets-any
    done
    admin ann-indexes
    local_env
    # The services reach the bus and the queues through MEMORY_AWS_PROXY when one is given (make soak's faults).
    AWS_ENDPOINT_URL="${MEMORY_AWS_PROXY:-$AWS_ENDPOINT_URL}" start retrieve "$CARGO_TARGET_DIR/debug/retrieve"
    # Without Bedrock the workers run the offline model stand-in (MEMORY_LLM=offline).
    AWS_ENDPOINT_URL="${MEMORY_AWS_PROXY:-$AWS_ENDPOINT_URL}" MEMORY_LLM="${MEMORY_WORKERS_LLM:-offline}" \
        start workers "$CARGO_TARGET_DIR/debug/local-workers"
    for _ in $(seq 1 150); do curl -fsS "$URL/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
    curl -fsS "$URL/healthz" >/dev/null || { echo "[run] server did not come up; see .local/retrieve.log" >&2; exit 1; }
    running workers || { echo "[run] workers did not start; see .local/workers.log" >&2; exit 1; }
    import_demo_repository
    echo
    echo "retrieve API: $URL   (logs: .local/retrieve.log; workers: .local/workers.log)"
    echo "ingest queue: $MEMORY_INGEST_QUEUE_URL"
    echo "token for the demo coding agent of organisation Acme:"
    echo "  export TOKEN=$(admin token --org 0a000000-0000-4000-8000-000000000001 --agent a1000000-0000-4000-8000-000000000001)"
    ;;
stop)
    stop workers
    stop retrieve
    "$ROOT/scripts/stack.sh" down
    ;;
stop-services)
    # The API and workers only; the stack stays up (make soak, when it ends).
    stop workers
    stop retrieve
    ;;
scan)
    load_stack_env
    local_env
    admin scan "${@:2}"
    ;;
admin)
    load_stack_env
    local_env
    admin "${@:2}"
    ;;
import-bench)
    # Against make run's API and workers (started if they are not running), as a user's import runs.
    running retrieve && running workers || "$0" start >/dev/null
    load_stack_env
    local_env
    "$CARGO_TARGET_DIR/debug/import-bench" "${@:2}"
    ;;
psql)
    load_stack_env
    exec "$MEMORY_PG_BIN/psql" "$MEMORY_ADMIN_DATABASE_URL" "${@:2}"
    ;;
events)
    load_stack_env
    admin events
    ;;
import-repo)
    load_stack_env
    local_env
    admin import-repo "${@:2}"
    ;;
token)
    args=(--org "$2")
    [[ -n "${3:-}" ]] && args+=(--agent "$3")
    [[ -n "${4:-}" ]] && args+=(--scope "$4")
    admin token "${args[@]}"
    ;;
*)
    echo "usage: $0 start|stop|stop-services|scan|events|import-repo ARGS|admin ARGS|psql|token ORG [AGENT] [SCOPE]" >&2
    exit 2
    ;;
esac
