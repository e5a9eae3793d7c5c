"""``convert_hf_to_gguf.py`` for a Llama whose ``tokenizer.json`` is byte-level BPE (GPT-2's byte
alphabet, no byte fallback; the testbed's models): its vocabulary and merges written as llama.cpp's
``gpt2`` tokenizer with the pre-tokenizer named by :func:`pre_tokenizer`.

The converter reads a Llama's vocabulary as sentencepiece, or a GPT-2 BPE whose pre-tokenizer it
recognises by hashing the tokens of a fixed text against a table of published models; a
tokenizer of our own is in no table ("BPE pre-tokenizer was not recognized"). Its pre-tokenizer
is one llama.cpp implements, so it is named from ``tokenizer.json`` itself rather than detected,
and the Llama converter is pointed at its GPT-2 vocabulary path; everything else is the
converter's own run.

As a script: ``python _llama_cpp_bytelevel.py CONVERTER HF_FOLDER [converter options]``.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any


def is_byte_level(tokenizer: dict[str, Any]) -> bool:
    """True for a BPE ``tokenizer.json`` that decodes through GPT-2's byte alphabet."""
    decoder = tokenizer.get("decoder") or {}
    return (tokenizer["model"].get("type") == "BPE" and not tokenizer["model"].get("byte_fallback")
            and decoder.get("type") == "ByteLevel")


def pre_tokenizer(tokenizer: dict[str, Any]) -> str:
    """llama.cpp's name for the pre-tokenizer of a byte-level ``tokenizer.json``: ``gpt-2`` for
    ByteLevel with GPT-2's regex alone; ``starcoder`` for every digit split off on its own
    (``Digits(individual_digits=True)``) and then ByteLevel with GPT-2's regex, which is
    llama.cpp's ``\\p{N}`` then GPT-2's regex. ``ValueError`` for any other."""
    pre = tokenizer.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [(p.get("type"), p.get("individual_digits"), p.get("use_regex"),
              p.get("add_prefix_space")) for p in parts]
    gpt2 = ("ByteLevel", None, True, False)
    if kinds == [gpt2]:
        return "gpt-2"
    if kinds == [("Digits", True, None, None), gpt2]:
        return "starcoder"
    raise ValueError(f"no llama.cpp pre-tokenizer for {json.dumps(pre)[:200]}")


def convert(converter: Path, hf_folder: str, options: list[str]) -> None:
    """Run ``converter`` on ``hf_folder`` with ``options`` (``--outtype``, ``--outfile``), its
    vocabulary written as GPT-2 BPE with :func:`pre_tokenizer`'s name."""
    tokenizer = json.loads((Path(hf_folder) / "tokenizer.json").read_text())
    if not is_byte_level(tokenizer):
        raise ValueError(f"{hf_folder}: tokenizer.json is not byte-level BPE")
    name = pre_tokenizer(tokenizer)
    sys.path.insert(0, str(converter.parent))
    import conversion.base
    import conversion.llama

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tok: name
    conversion.llama.LlamaModel.set_vocab = lambda self: self._set_vocab_gpt2()
    sys.argv = [str(converter), hf_folder, *options]
    runpy.run_path(str(converter), run_name="__main__")


if __name__ == "__main__":
    convert(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
