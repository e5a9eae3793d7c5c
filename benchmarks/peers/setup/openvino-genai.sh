#!/usr/bin/env bash
# OpenVINO GenAI peer of the engine benchmark, in its own virtual environment.
#   bash benchmarks/peers/setup/openvino-genai.sh <env-dir>
# Runtime: openvino-genai (LLMPipeline / ContinuousBatchingPipeline). Export (done by the worker,
# on first use of a model): optimum-intel's `optimum-cli export openvino --weight-format fp32`,
# then, for the int8 peer, NNCF's weight compression (what `--weight-format int8` runs); export
# needs torch; torch is the local CPU build, installed first so that pip never resolves a
# CUDA torch. optimum-intel is installed without its dependencies and they are listed here: it
# requires torchvision, whose PyPI build for another torch breaks `import transformers` there,
# and the export of a causal LM never uses it. Idempotent: a second run only checks the stamp.
set -euo pipefail
env_dir="${1:?usage: openvino-genai.sh <env-dir>}"
python="${PYTHON:-python3.11}"
# The CPU build of torch (here from the local wheel folder; elsewhere add
# --extra-index-url https://download.pytorch.org/whl/cpu through PIP_EXTRA_INDEX_URL).
torch_spec="${TORCH_SPEC:-torch==2.13.0+cpu}"
ov_version="2026.4.1.0"
pins=(
  "openvino-genai==$ov_version" "openvino-tokenizers==$ov_version"
  "optimum==2.3.0" "transformers>=4.51,<5.6" "huggingface-hub>=0.23.2,<1.22"
  "setuptools" "requests>=2.33,<3.0" "numpy" "safetensors"
)
stamp="$env_dir/.metagen-openvino-genai-$ov_version-optimum-intel-2.2.0-nncf-3.4.0"
if [ -f "$stamp" ] && "$env_dir/bin/python" -c "import openvino_genai, optimum.intel, nncf" 2>/dev/null
then
  echo "openvino-genai $ov_version already installed in $env_dir"
  exit 0
fi
[ -x "$env_dir/bin/python" ] || "$python" -m venv "$env_dir"
pip=("$env_dir/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" "$torch_spec"
echo "$torch_spec" > "$env_dir/torch-constraint.txt"
"${pip[@]}" -c "$env_dir/torch-constraint.txt" "${pins[@]}"
"${pip[@]}" --no-deps "optimum-intel==2.2.0"
# NNCF: the weight compression behind `--weight-format int8` (the openvino-genai-int8 peer)
"${pip[@]}" -c "$env_dir/torch-constraint.txt" "nncf==3.4.0"
"$env_dir/bin/python" -m pip uninstall -y -q torchvision 2>/dev/null || true
# The checks that matter: the runtime imports, the exporter imports with transformers, and
# torch is still the CPU build.
"$env_dir/bin/python" - <<'EOF'
import openvino_genai, openvino, torch, transformers
from optimum.intel import OVModelForCausalLM  # noqa: F401  (the exporter's entry point)
import nncf  # noqa: F401  (int8 weight compression)
assert torch.version.cuda is None, f"a CUDA torch was installed: {torch.__version__}"
print("openvino-genai", openvino_genai.__version__, "| openvino", openvino.__version__,
      "| torch", torch.__version__, "| transformers", transformers.__version__)
EOF
touch "$stamp"
