#!/usr/bin/env bash
# make soak [SOAK_BATCHES=60]: the lifecycle as production runs it. make run's API and workers, the workers with
# the adversarial model stand-in (it obeys instructions in memory text, answers in prose, names ids it was not
# given), both calling the bus and the queues through a fault-injecting proxy (calls dropped, throttled, answers
# lost, outages; on 127.0.0.1:MEMORY_SOAK_PROXY_PORT, moto's port + 100 unless set); a stream of producers'
# messages through the ingest queue, with every connection of the application role killed once and the workers'
# process killed mid-stream and restarted; then the checks (memory-soak check) and the counts. Exits non-zero on
# any violation; the API and workers it started are stopped when it ends (they call the proxy, which ends too).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BATCHES="${SOAK_BATCHES:-60}"
RUN="$(date +%s)"
export MEMORY_WORKERS_LLM=adversarial
soak() { "$CARGO_TARGET_DIR/debug/memory-soak" "$@"; }
"$ROOT/scripts/run.sh" stop >/dev/null 2>&1 || true
"$ROOT/scripts/stack.sh" up >/dev/null
load_stack_env
cd "$ROOT" && cargo build --quiet --workspace --bins
# What reaches the bus is counted from a queue of the run's own, subscribed before anything publishes.
soak subscribe --run "$RUN"
PROXY="127.0.0.1:${MEMORY_SOAK_PROXY_PORT:-$((MEMORY_MOTO_PORT + 100))}"
if (exec 3<>"/dev/tcp/${PROXY/://}") 2>/dev/null; then
    echo "[soak] $PROXY is taken: set MEMORY_SOAK_PROXY_PORT to a free port" >&2
    exit 1
fi
"$CARGO_TARGET_DIR/debug/memory-soak" proxy --listen "$PROXY" --upstream "$AWS_ENDPOINT_URL" >"$ROOT/.local/soak-proxy.log" 2>&1 &
proxy_pid=$!
stop_all() {
    "$ROOT/scripts/run.sh" stop-services >/dev/null 2>&1 || true
    kill "$proxy_pid" 2>/dev/null || true
}
trap stop_all EXIT
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/${PROXY/://}") 2>/dev/null && break; sleep 0.1; done
kill -0 "$proxy_pid" 2>/dev/null || { echo "[soak] the proxy did not start; see .local/soak-proxy.log" >&2; exit 1; }
MEMORY_AWS_PROXY="http://$PROXY" "$ROOT/scripts/run.sh" start >/dev/null
half=$((BATCHES / 2))
echo "[soak] run $RUN: $BATCHES batches; the application's connections killed halfway through the first $half" >&2
soak send --run "$RUN" --from 0 --to "$half" --terminate-connections
# A worker process killed mid-batch: SQS gives what it held to the restarted one.
kill -9 "$(cat "$ROOT/.local/workers.pid")"
rm -f "$ROOT/.local/workers.pid"   # a killed process may linger as a zombie that kill -0 still finds
echo "[soak] workers killed; restarting them" >&2
MEMORY_AWS_PROXY="http://$PROXY" "$ROOT/scripts/run.sh" start >/dev/null
soak send --run "$RUN" --from "$half" --to "$BATCHES"
soak check --run "$RUN" --sent "$BATCHES" --faults 1 --wait "${SOAK_WAIT:-300}" --proxy "$PROXY"
