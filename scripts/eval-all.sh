#!/usr/bin/env bash
# make eval-all / make code-eval: retrieval quality on the four shapes of memory, one summary table.
#   scripts/eval-all.sh [SET...]   sets: scifact realtalk madial chrono jinja2 (default: all)
# Documents (SciFact), conversation turns (REALTALK), fact-shaped memories (MADial-Bench) and code (chrono, jinja2),
# each converted into the BEIR layout under .local/ and evaluated by one memory-eval run. EVAL_ARGS is passed on.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
DATA="${MEMORY_EVAL_DATA:-$ROOT/../shared/data}"
STRATEGIES="${EVAL_STRATEGIES:-vector,keyword,hybrid,pipeline,pipeline-passive}"
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(scifact realtalk madial chrono jinja2)

"$ROOT/scripts/stack.sh" up
load_stack_env
echo "[eval] building the converters and memory-eval with the perf profile" >&2
cargo build --quiet --profile perf -p memory-tools
bin="$CARGO_TARGET_DIR/perf"

# The code sets: public sources the machine already holds, the chrono crate from the cargo registry and the jinja2
# package from the local stack's virtualenv.
code_source() {
    case "$1" in
        chrono) ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/chrono-0.4.*/src 2>/dev/null | sort -V | tail -1 ;;
        jinja2) ls -d "$ROOT"/.local/venv/lib/python3*/site-packages/jinja2 2>/dev/null | tail -1 ;;
    esac || true
}

datasets=()
for set in "${sets[@]}"; do
    case "$set" in
        scifact) datasets+=(--dataset "$DATA/scifact") ;;
        realtalk)
            "$bin/realtalk-to-beir" --input "$DATA/realtalk" --output .local/realtalk-beir >&2
            datasets+=(--dataset .local/realtalk-beir) ;;
        madial)
            "$bin/madial-to-beir" --input "$DATA/madial-bench/en" --output .local/madial-beir >&2
            datasets+=(--dataset .local/madial-beir) ;;
        chrono | jinja2)
            source_dir="$(code_source "$set")"
            [ -n "$source_dir" ] || { echo "[eval] no $set sources on this machine" >&2; exit 1; }
            "$bin/code-to-beir" --source "$source_dir" --out ".local/code-beir/$set" >&2
            datasets+=(--dataset ".local/code-beir/$set") ;;
        *) echo "unknown set $set (scifact realtalk madial chrono jinja2)" >&2; exit 2 ;;
    esac
done

# shellcheck disable=SC2086 # EVAL_ARGS is a list of flags
exec "$bin/memory-eval" "${datasets[@]}" --strategies "$STRATEGIES" \
    --summary .local/eval-all.md --json .local/eval-all.json ${EVAL_ARGS:-}
