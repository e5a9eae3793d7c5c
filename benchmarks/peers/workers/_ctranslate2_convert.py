"""Convert a benchmark Llama (Hugging Face folder, no tokenizer files) into a CTranslate2 model.

Run as a script in the CTranslate2 peer's environment (it imports torch and transformers, which
the worker itself never loads)::

    python _ctranslate2_convert.py <hf_folder> <out_dir> [<hf_folder> <out_dir> ...]

CTranslate2's ``TransformersConverter`` reads the vocabulary (and BOS/EOS/UNK) from the model's
tokenizer, and the factory's models have none. So the folder is mirrored into a temporary
directory (symlinks to its config and weights) next to a synthetic word-level tokenizer with one
piece per id: ``<unk>``/``<s>``/``</s>`` at the config's unk(0)/bos/eos ids, ``<t{id}>`` for the
rest. The worker maps token ids to these strings and back through the converted model's
``vocabulary.json``. Weights stay float32 (no quantisation), so greedy tokens can be compared
across peers. The result is written to ``<out_dir>.tmp`` and renamed, so a killed conversion
never leaves a half-written cache entry.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from _serve import mirror_without_tokenizer


def synthetic_vocab(vocab_size: int, bos_id: int | None, eos_id: int | None) -> list[str]:
    """One distinct piece per token id; the special ids get the usual Llama names."""
    pieces = [f"<t{i}>" for i in range(vocab_size)]
    for tok_id, name in ((0, "<unk>"), (bos_id, "<s>"), (eos_id, "</s>")):
        if tok_id is not None and 0 <= tok_id < vocab_size:
            pieces[tok_id] = name
    return pieces


def write_tokenizer(folder: Path, pieces: list[str]) -> None:
    """A `tokenizers` WordLevel tokenizer.json + tokenizer_config.json over ``pieces``."""
    special = {"<unk>", "<s>", "</s>"}
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, p in enumerate(pieces) if p in special]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
           "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": {p: i for i, p in enumerate(pieces)},
                     "unk_token": "<unk>"}}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>"}
    cfg.update({k: v for k, v in (("bos_token", "<s>"), ("eos_token", "</s>")) if v in pieces})
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


def convert(hf_folder: str, out_dir: str) -> None:
    from ctranslate2.converters import TransformersConverter

    src, out = Path(hf_folder), Path(out_dir)
    config = json.loads((src / "config.json").read_text())
    pieces = synthetic_vocab(config["vocab_size"], config.get("bos_token_id"),
                             config.get("eos_token_id"))
    tmp_out = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp_out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="ct2-hf-") as tmp:
        mirror = Path(tmp)
        mirror_without_tokenizer(src, mirror)
        write_tokenizer(mirror, pieces)
        TransformersConverter(str(mirror)).convert(str(tmp_out), quantization="float32")
    vocab = json.loads((tmp_out / "vocabulary.json").read_text())
    if vocab != pieces:  # the converter must keep our one-piece-per-id vocabulary as is
        raise RuntimeError(f"converted vocabulary differs from the synthetic one "
                           f"({len(vocab)} vs {len(pieces)} pieces)")
    tmp_out.rename(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: _ctranslate2_convert.py <hf_folder> <out_dir> [...]")
    for i in range(0, len(args), 2):  # one process: torch and transformers import once
        convert(args[i], args[i + 1])
