#!/usr/bin/env bash
# onnxruntime-genai peer: a venv at $1 with onnxruntime-genai (runtime + its model builder) and
# what the builder imports (torch, transformers, onnx, onnx-ir). The worker
# (benchmarks/peers/workers/onnxruntime_genai.py) converts each model with
#   python -m onnxruntime_genai.models.builder -i <hf folder> -o <out> -p fp32 -e cpu
# on first use (benchmarks/peers/workers/_onnxruntime_genai_convert.py), cached in <env>/models.
# Idempotent: a second run only checks that the pins import.
set -euo pipefail
env_dir="${1:?usage: onnxruntime-genai.sh <env-dir>}"
OGA_VERSION=0.18.0
TORCH_VERSION=2.13.0  # the local CPU build (pip's find-links /opt/wheels); never a CUDA one
TRANSFORMERS_VERSION=5.23.0  # the version metagen's own environment uses

py="$env_dir/bin/python"
stamp="$env_dir/.installed-$OGA_VERSION"
if [ -f "$stamp" ] && "$py" -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ('onnxruntime_genai', 'onnxruntime', 'torch',
                                              'transformers', 'onnx', 'onnx_ir', 'tokenizers')))"
then
  echo "onnxruntime-genai $OGA_VERSION already installed in $env_dir"
  exit 0
fi
[ -x "$py" ] || python3 -m venv "$env_dir"
pip_install() {  # the local pip config names mirror folders that lack most packages: quiet that
  "$py" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
# torch first, from the local CPU wheel, so that nothing later resolves a CUDA torch.
pip_install --only-binary=:all: "torch==$TORCH_VERSION" "numpy==2.4.6"
"$py" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 'CUDA torch installed')"
pip_install --only-binary=:all: "onnxruntime-genai==$OGA_VERSION" \
  "onnxruntime==1.31.1" "transformers==$TRANSFORMERS_VERSION" "onnx==1.23.2" "onnx-ir==1.1.0" tqdm
"$py" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 'CUDA torch installed')"
"$py" -c "import onnx, onnx_ir, tokenizers, transformers, onnxruntime_genai as og, onnxruntime as ort
print('onnxruntime-genai', og.__version__, 'onnxruntime', ort.__version__)"
touch "$stamp"
