#!/usr/bin/env bash
# make eval-all / make code-eval: retrieval quality on the four shapes of memory, one summary table.
#   scripts/eval-all.sh [SET...]   sets: scifact realtalk madial chrono jinja2 serde_json (default: all)
# Documents (SciFact), conversation turns (REALTALK), fact-shaped memories (MADial-Bench) and code (chrono, jinja2
# converted chunk by chunk; serde_json imported whole as `make import-repo` imports a repository: its ingest messages,
# doc comments, Markdown and tests included), each under .local/ and evaluated by one memory-eval run, which also
# scores the learned ranking fitted on the other shapes (--leave-one-shape-out). EVAL_ARGS is passed on.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"
DATA="${MEMORY_EVAL_DATA:-$ROOT/../shared/data}"
STRATEGIES="${EVAL_STRATEGIES:-vector,keyword,hybrid,pipeline,pipeline-passive}"
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(scifact realtalk madial chrono jinja2 serde_json)

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
        serde_json) ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/serde_json-1.* 2>/dev/null | sort -V | tail -1 ;;
    esac || true
}

# A crate's sources committed as a git repository, as a user's clone would be (made once).
as_repository() {
    local repo="$ROOT/.local/code-repos/$1"
    if [[ ! -d "$repo/.git" ]]; then
        mkdir -p "$repo"
        cp -r "$2/." "$repo/"
        git -C "$repo" init -q -b main
        git -C "$repo" add -A
        git -C "$repo" -c user.name=eval -c user.email=eval@example.com -c commit.gpgsign=false commit -q -m "$1"
    fi
    echo "$repo"
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
        serde_json)
            source_dir="$(code_source "$set")"
            [ -n "$source_dir" ] || { echo "[eval] no $set sources on this machine" >&2; exit 1; }
            "$bin/code-to-beir" --source "$(as_repository "$set" "$source_dir")" --as-imported \
                --out ".local/code-beir/$set-imported" >&2
            datasets+=(--dataset ".local/code-beir/$set-imported") ;;
        *) echo "unknown set $set (scifact realtalk madial chrono jinja2 serde_json)" >&2; exit 2 ;;
    esac
done

# shellcheck disable=SC2086 # EVAL_ARGS is a list of flags
exec "$bin/memory-eval" "${datasets[@]}" --strategies "$STRATEGIES" \
    --leave-one-shape-out --summary .local/eval-all.md --json .local/eval-all.json ${EVAL_ARGS:-}
