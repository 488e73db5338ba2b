# Sourced by the scripts: paths and the local stack's environment.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Reuse a build directory outside the checkout when one is set (CI and repeated clones share it).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export MEMORY_JWT_SECRET="${MEMORY_JWT_SECRET:-local-dev-secret-not-for-production}"
load_stack_env() { source "$ROOT/.local/stack.env"; }
# The onnxruntime version requirements.txt pins (the library the model directory and the layer carry).
onnxruntime_version() { grep '^onnxruntime==' "$ROOT/requirements.txt" | cut -d= -f3; }
