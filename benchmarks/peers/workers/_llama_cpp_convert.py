"""Hugging Face Llama folder -> fp32 GGUF, with the converter llama-cpp-python's sdist vendors.

The setup script unpacks ``vendor/llama.cpp/convert_hf_to_gguf.py`` (with its ``conversion``
package and ``gguf-py``) into ``<env>/llama.cpp-convert``. The benchmark's models carry no
tokenizer, so the folder is mirrored into a temporary directory (symlinks) next to a synthetic
``tokenizer.model`` of the config's ``vocab_size`` pieces (:mod:`_llama_cpp_vocab`); the workloads
use token ids only, so the vocabulary's text never matters. A model served over text (the
llama.cpp server tests) keeps its own vocabulary instead: ``own_vocab=True`` restates its Llama
``tokenizer.json`` as that ``tokenizer.model``. The result is cached per model (and vocabulary) by
:func:`_serve.converted_dir`.

As a script, ``python _llama_cpp_convert.py HF_FOLDER [--own-vocab]`` prints the GGUF's path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _llama_cpp_vocab import model_proto, tokenizer_json_pieces
from _serve import converted_dir, mirror_without_tokenizer

CONVERTER = Path(sys.executable).parent.parent / "llama.cpp-convert" / "convert_hf_to_gguf.py"


def gguf_for(hf_folder: str, own_vocab: bool = False) -> Path:
    """The fp32 GGUF of ``hf_folder`` (``--outtype f32``: no quantisation, no fp16), converted
    on first use and cached; with the synthetic vocabulary, or its own (``own_vocab``)."""
    out_dir = converted_dir(hf_folder, "gguf-f32-own-vocab" if own_vocab else "gguf-f32")
    out = out_dir / "model-f32.gguf"
    if out.is_file():
        return out
    if not CONVERTER.is_file():
        raise FileNotFoundError(f"{CONVERTER} missing: run benchmarks/setup_peers.sh llama.cpp")
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer_json_pieces(json.loads((Path(hf_folder) / "tokenizer.json").read_text())) \
        if own_vocab else json.loads((Path(hf_folder) / "config.json").read_text())["vocab_size"]
    with tempfile.TemporaryDirectory(prefix="llama-cpp-hf-") as tmp:
        mirror_without_tokenizer(hf_folder, Path(tmp))
        (Path(tmp) / "tokenizer.model").write_bytes(model_proto(vocab))
        partial = out_dir / "model-f32.gguf.partial"
        # the converter logs to stdout: send it to stderr (the protocol owns our stdout)
        subprocess.run([sys.executable, str(CONVERTER), tmp, "--outtype", "f32",
                        "--outfile", str(partial)], check=True, stdout=sys.stderr)
    partial.rename(out)
    return out


if __name__ == "__main__":
    print(gguf_for(sys.argv[1], own_vocab="--own-vocab" in sys.argv[2:]))
