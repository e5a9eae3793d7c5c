#!/usr/bin/env bash
# CTranslate2 peer: bash benchmarks/peers/setup/ctranslate2.sh <env-dir>
# A venv with ctranslate2 (the runtime) plus what its TransformersConverter needs to convert the
# benchmark's Hugging Face Llamas: transformers, and torch -- the local CPU build, installed first
# so that nothing resolves a CUDA torch. Idempotent: a second run only checks the installed
# versions (under a second).
# The worker (benchmarks/peers/workers/ctranslate2_worker.py) converts models on first use into
# <env-dir>/models.
set -euo pipefail
env_dir="${1:?usage: ctranslate2.sh <env-dir>}"
CT2_VERSION="${CT2_VERSION:-4.8.5}"
TORCH_VERSION="2.13.0"
TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.23.0}"
PYTHON="${PYTHON:-python3.11}"

check() {  # versions from the installed metadata: no import of torch, so a re-run is quick
  "$env_dir/bin/python" - "$CT2_VERSION" "$TORCH_VERSION" <<'PY'
import sys
from importlib.metadata import version
ct2, torch, tf = version("ctranslate2"), version("torch"), version("transformers")
assert ct2 == sys.argv[1], f"ctranslate2 {ct2}"
assert torch.split("+")[0] == sys.argv[2] and torch.endswith("+cpu"), f"torch {torch}"
import ctranslate2  # the runtime loads
print(f"ctranslate2 {ct2}, torch {torch}, transformers {tf}")
PY
}

if [ -x "$env_dir/bin/python" ] && check 2>/dev/null; then
  echo "ctranslate2 peer already installed in $env_dir"
  exit 0
fi

"$PYTHON" -m venv "$env_dir"
pip=("$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check)
# torch first, the local CPU wheel when there is one (never a CUDA build from an index)
torch_wheel=$(ls /opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$torch_wheel" ]; then
  "${pip[@]}" "$torch_wheel"
else
  "${pip[@]}" "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu
fi
"${pip[@]}" "ctranslate2==$CT2_VERSION" "transformers==$TRANSFORMERS_VERSION" tokenizers \
  safetensors
check
