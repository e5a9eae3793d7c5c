"""Hugging Face Llama folder -> GGUF (fp32, Q8_0 or Q4_0), with the converter llama-cpp-python's
sdist vendors (fp32 and Q8_0: its ``--outtype``) and llama.cpp's own quantizer (Q4_0, from the
fp32 GGUF, as ``llama-quantize`` makes it: its default mix keeps the output matrix at Q6_K).

The setup script unpacks ``vendor/llama.cpp/convert_hf_to_gguf.py`` (with its ``conversion``
package and ``gguf-py``) into ``<env>/llama.cpp-convert``. The benchmark's models carry no
tokenizer, so the folder is mirrored into a temporary directory (symlinks) next to a synthetic
``tokenizer.model`` of the config's ``vocab_size`` pieces (:mod:`_llama_cpp_vocab`); the workloads
use token ids only, so the vocabulary's text never matters. A model served over text (the
llama.cpp server tests) keeps its own vocabulary instead: ``own_vocab=True`` restates its Llama
``tokenizer.json`` as that ``tokenizer.model``, or, for a byte-level BPE ``tokenizer.json`` (the
testbed's), converts the folder as it is with that vocabulary as GPT-2 BPE
(:mod:`_llama_cpp_bytelevel`). The result is cached per model (and vocabulary) by
:func:`_serve.converted_dir`.

As a script, ``python _llama_cpp_convert.py HF_FOLDER [--own-vocab]`` prints the GGUF's path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _llama_cpp_bytelevel import is_byte_level
from _llama_cpp_vocab import model_proto, tokenizer_json_pieces
from _serve import converted_dir, mirror_without_tokenizer

CONVERTER = Path(sys.executable).parent.parent / "llama.cpp-convert" / "convert_hf_to_gguf.py"
BYTELEVEL = Path(__file__).with_name("_llama_cpp_bytelevel.py")


def gguf_for(hf_folder: str, own_vocab: bool = False, weights: str = "f32") -> Path:
    """The GGUF of ``hf_folder`` with ``weights`` "f32" (``--outtype f32``: no quantisation, no
    fp16), "q8_0" (``--outtype q8_0``) or "q4_0" (:func:`quantized` from the f32 GGUF),
    converted on first use and cached; with the synthetic vocabulary, or its own
    (``own_vocab``)."""
    if weights == "q4_0":
        return quantized(gguf_for(hf_folder, own_vocab), weights)
    if weights not in ("f32", "q8_0"):
        raise ValueError(f"weights={weights!r}: use f32, q8_0 or q4_0")
    out_dir = converted_dir(hf_folder, f"gguf-{weights}" + ("-own-vocab" if own_vocab else ""))
    out = out_dir / f"model-{weights}.gguf"
    if out.is_file():
        return out
    if not CONVERTER.is_file():
        raise FileNotFoundError(f"{CONVERTER} missing: run benchmarks/setup_peers.sh llama.cpp")
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    tokenizer = json.loads((Path(hf_folder) / "tokenizer.json").read_text()) if own_vocab else {}
    if own_vocab and is_byte_level(tokenizer):
        subprocess.run([sys.executable, str(BYTELEVEL), str(CONVERTER), hf_folder, "--outtype",
                        weights, "--outfile", str(partial)], check=True, stdout=sys.stderr)
        partial.rename(out)
        return out
    vocab = tokenizer_json_pieces(tokenizer) if own_vocab \
        else json.loads((Path(hf_folder) / "config.json").read_text())["vocab_size"]
    with tempfile.TemporaryDirectory(prefix="llama-cpp-hf-") as tmp:
        mirror_without_tokenizer(hf_folder, Path(tmp))
        (Path(tmp) / "tokenizer.model").write_bytes(model_proto(vocab))
        # the converter logs to stdout: send it to stderr (the protocol owns our stdout)
        subprocess.run([sys.executable, str(CONVERTER), tmp, "--outtype", weights,
                        "--outfile", str(partial)], check=True, stdout=sys.stderr)
    partial.rename(out)
    return out


def quantized(f32_gguf: Path, weights: str) -> Path:
    """``f32_gguf`` quantized by ``llama_model_quantize`` (what ``llama-quantize`` runs) to
    ``weights`` ("q4_0"), written beside it once."""
    import ctypes

    import llama_cpp

    out = f32_gguf.with_name(f"model-{weights}.gguf")
    if out.is_file():
        return out
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[weights]
    partial = out.with_name(out.name + ".partial")
    if llama_cpp.llama_model_quantize(str(f32_gguf).encode(), str(partial).encode(),
                                      ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize {f32_gguf} -> {weights} failed")
    partial.rename(out)
    return out


def decode_read_bytes(gguf_file: Path) -> int:
    """Bytes of the GGUF's tensors but the input embedding table (``token_embd.weight``), each
    in its stored type (Q8_0: 34 bytes per 32 weights; Q4_0: 18)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(str(gguf_file)).tensors
               if t.name != "token_embd.weight")


if __name__ == "__main__":
    print(gguf_for(sys.argv[1], own_vocab="--own-vocab" in sys.argv[2:]))
