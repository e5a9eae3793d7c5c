#!/usr/bin/env bash
# llama.cpp peer: llama-cpp-python (CPU build from source) + the converter its sdist vendors,
# + its OpenAI-compatible server's dependencies (the `server` extra; tests/generators use it).
#   bash benchmarks/peers/setup/llama.cpp.sh <env-dir>
# The source build takes ~12 min on 2 cores, so the wheel (and the sdist, which carries
# vendor/llama.cpp/convert_hf_to_gguf.py and gguf-py) is cached in <env-dir>/../wheels and reused
# by a second run. The converter imports torch: the local CPU torch is installed first, so pip
# never resolves a CUDA one. Idempotent: a finished env is detected by its stamp file.
set -euo pipefail
env_dir="$1"
version="0.3.36"
torch_version="2.13.0"
wheels="$(dirname "$env_dir")/wheels"
stamp="$env_dir/.llama-cpp-python-$version-server"
if [ -f "$stamp" ]; then echo "llama.cpp: $env_dir is ready (llama-cpp-python $version)"; exit 0; fi
mkdir -p "$wheels"

# 1. the sdist (for the converter) and the CPU wheel built from it, both cached
sdist="$wheels/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  tmp="$(mktemp -d)"
  python3 -m pip download --no-deps --no-binary :all: --no-build-isolation -d "$tmp" \
    "llama-cpp-python==$version" \
    || python3 -m pip download --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$version"
  mv "$tmp"/llama_cpp_python-"$version".tar.gz "$sdist"
  rm -rf "$tmp"
fi
wheel="$(ls "$wheels"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
  echo "llama.cpp: building llama-cpp-python $version from source (CPU, ~12 min on 2 cores)"
  # CPU only, no BLAS (fp32 matmuls by ggml itself), tuned to this machine; no examples/tests.
  cmake_args=(-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF
              -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
              -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF)
  CMAKE_ARGS="${cmake_args[*]}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    nice python3 -m pip wheel --no-deps -w "$wheels" "$sdist"
  wheel="$(ls "$wheels"/llama_cpp_python-"$version"-*.whl | head -n1)"
fi

# 2. the environment
[ -x "$env_dir/bin/python" ] || python3 -m venv "$env_dir"
pip=("$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check)
torch_wheel="$(ls /opt/wheels/torch-"$torch_version"+cpu-*.whl 2>/dev/null | head -n1 || true)"
"${pip[@]}" --find-links /opt/wheels "${torch_wheel:-torch==$torch_version+cpu}"
# the wheel, with the converter's own pins (requirements/requirements-convert_*.txt) but torch
"${pip[@]}" "$wheel" "numpy~=2.2.6" "sentencepiece>=0.1.98,<0.3.0" "protobuf>=4.21.0,<5.0.0" \
  "transformers==4.57.6"
# the `server` extra of llama-cpp-python (python -m llama_cpp.server), pinned to versions that
# run it with 0.3.36 (uvicorn>=0.22, fastapi>=0.100, pydantic-settings>=2.0.1,
# sse-starlette>=1.6.1, starlette-context>=0.3.6,<0.4, PyYAML>=5.1)
"${pip[@]}" "uvicorn==0.54.0" "fastapi==0.165.0" "pydantic-settings==2.16.3" \
  "sse-starlette==3.7.0" "starlette-context==0.3.6" "PyYAML==6.0.4"

# 3. the converter and its gguf-py, unpacked from the sdist into the env
conv="$env_dir/llama.cpp-convert"
rm -rf "$conv" && mkdir -p "$conv"
tar -xzf "$sdist" -C "$conv" --strip-components=3 \
  "llama_cpp_python-$version/vendor/llama.cpp/convert_hf_to_gguf.py" \
  "llama_cpp_python-$version/vendor/llama.cpp/conversion" \
  "llama_cpp_python-$version/vendor/llama.cpp/gguf-py"
"${pip[@]}" "$conv/gguf-py"
"$env_dir/bin/python" -c "import llama_cpp, llama_cpp.server.app, gguf, sentencepiece, torch
print('llama.cpp:', llama_cpp.__version__, '(with server) torch', torch.__version__)"
touch "$stamp"
