#!/usr/bin/env bash
# make smoke (with make run up): the whole local flow with nothing typed but the queue send. One ingest message
# goes to the local ingest queue; the workers check and promote it; retrieval returns it; the domain events of
# the flow arrive on the local bus.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
load_stack_env
admin() { "$CARGO_TARGET_DIR/debug/memory-admin" "$@"; }
ORG=0a000000-0000-4000-8000-000000000001
URL="http://${MEMORY_BIND:-127.0.0.1:8787}"
fact="The smoke test $(date +%s%N) memory says the release train leaves on Thursdays."
batch="$(mktemp)"
trap 'rm -f "$batch"' EXIT
admin events --wait 0 >/dev/null 2>&1 || true   # forget earlier events
printf '{"job_type":"memory_ingest","organization_id":"%s","batch_id":"smoke-%s","memories":[{"content":"%s","memory_type":"semantic","scope":"org","provenance":{"source_kind":"conversation_turn","source_ref":"smoke","trust_level":"unverified"}}]}\n' \
    "$ORG" "$(date +%s%N)" "$fact" >"$batch"
token="$(admin token --org "$ORG")"
sent=$(date +%s%N)
admin ingest "$batch"
for _ in $(seq 1 60); do
    found="$(curl -fsS "$URL/v1/retrieve" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
        -d "{\"mode\":\"agent_query\",\"query\":\"$fact\",\"max_results\":1}" | grep -c "$fact" || true)"
    [[ "$found" -gt 0 ]] && break
    sleep 0.5
done
[[ "$found" -gt 0 ]] || { echo "[smoke] the ingested memory was not retrievable" >&2; exit 1; }
echo "[smoke] the ingested memory is active and retrieved $(( ($(date +%s%N) - sent) / 1000000 )) ms after the send"
events="$(admin events --wait 2)"
for kind in memory.created memory.promoted; do
    grep -q "^$kind " <<<"$events" || { echo "[smoke] no $kind event on the local bus" >&2; exit 1; }
done
echo "[smoke] memory.created and memory.promoted arrived on the local bus"
# The request's log line and its metrics (CloudWatch embedded metric format) are in the API's log; the workers'
# published events are counted in theirs.
grep -q 'retrieval.*mode="agent_query"\|"mode":"agent_query".*retrieval\|retrieval mode=agent_query\|mode=agent_query.*retrieval\|mode="agent_query"' "$ROOT/.local/retrieve.log" \
    || { echo "[smoke] no retrieval log line in .local/retrieve.log" >&2; exit 1; }
grep -q '"Namespace":"agent-memory".*retrieval_latency_ms\|retrieval_latency_ms.*"Namespace":"agent-memory"' "$ROOT/.local/retrieve.log" \
    || { echo "[smoke] no retrieval_latency_ms metric in .local/retrieve.log" >&2; exit 1; }
grep -q 'domain_events' "$ROOT/.local/workers.log" || { echo "[smoke] no domain_events metric in .local/workers.log" >&2; exit 1; }
echo "[smoke] the request's log line and metrics are in .local/retrieve.log, the workers' in .local/workers.log"
# An MCP client from the registry (PyPI mcp) against the running API: the tools listed, memory.query answered.
mcp="$("$MEMORY_PYTHON" "$ROOT/tests/mcp/client.py" "$URL/mcp" "$token" "[[\"memory.query\", {\"query\": \"$fact\"}]]")"
grep -q '"name": "read_file_range"' <<<"$mcp" && grep -q 'release train leaves on Thursdays' <<<"$mcp" \
    || { echo "[smoke] the MCP client did not list the tools or find the memory: $mcp" >&2; exit 1; }
echo "[smoke] an MCP client listed the tools and memory.query found the memory"
