"""Export Hugging Face Llama folders to fp32 OpenVINO IR for the OpenVINO GenAI worker, and
compress fp32 IR folders to int8 weights.

    python _openvino_genai_export.py SRC DST [SRC DST ...]
    python _openvino_genai_export.py --int8 FP32_IR DST [FP32_IR DST ...]

What ``optimum-cli export openvino --task text-generation-with-past --weight-format fp32 SRC DST``
does (optimum-intel's ``main_export``: a stateful IR with ``input_ids, attention_mask,
position_ids, beam_idx`` inputs, plus ``openvino_tokenizer.xml``/``openvino_detokenizer.xml``),
for several models in one process, so that torch and transformers load once. Runs in a
subprocess of the worker, which itself never imports torch.

The benchmark's models have no tokenizer, but OpenVINO GenAI's speculative pipeline needs one
(it compares the draft's and the target's). The worker passes token ids, so any tokenizer with the
model's vocabulary size will do: :func:`synthetic_tokenizer` writes one (a BPE without merges
whose pieces are ``<unk> <s> </s>`` and ``▁t3 .. ▁t{V-1}``) into a staging copy of the folder
(its weight files symlinked), never into the source folder.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _serve import mirror_without_tokenizer

SPECIALS = ("<unk>", "<s>", "</s>")


def synthetic_tokenizer(vocab_size: int) -> dict:
    """A Hugging Face ``tokenizer.json`` with ``vocab_size`` pieces: ids 0-2 are the special
    ``<unk> <s> </s>`` (the factory's bos 1 / eos 2), id i >= 3 is ``▁t{i}``."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"\u2581t{i}": i for i in range(len(SPECIALS), vocab_size)})
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, tok in enumerate(SPECIALS)]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": metaspace, "post_processor": None,
            "decoder": metaspace,
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


def staged(src: str, root: Path) -> Path:
    """A folder beside nothing else: ``src``'s files symlinked, plus the synthetic tokenizer."""
    src_dir = Path(src).resolve()
    stage = root / src_dir.name
    stage.mkdir()
    mirror_without_tokenizer(src_dir, stage)
    vocab_size = json.loads((src_dir / "config.json").read_text())["vocab_size"]
    (stage / "tokenizer.json").write_text(json.dumps(synthetic_tokenizer(vocab_size)))
    (stage / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
         "unk_token": "<unk>", "model_max_length": 1 << 30}))
    return stage


def compress_int8(ir: str, dst: str) -> None:
    """What ``--weight-format int8`` does to the model: NNCF's ``compress_weights`` in its
    default int8 mode (INT8_ASYM: per output channel, uint8 weights with a zero point and a
    scale, every MatMul and embedding weight); the fp32 IR folder's other files (tokenizer IRs,
    configs) are copied beside it."""
    import shutil

    import nncf
    import openvino as ov

    core = ov.Core()
    model = nncf.compress_weights(core.read_model(Path(ir) / "openvino_model.xml"),
                                  mode=nncf.CompressWeightsMode.INT8_ASYM)
    for f in Path(ir).iterdir():
        if f.is_file() and not f.name.startswith("openvino_model."):
            shutil.copy2(f, Path(dst) / f.name)
    ov.save_model(model, Path(dst) / "openvino_model.xml", compress_to_fp16=False)


def main(argv: list[str]) -> None:
    int8 = argv[:1] == ["--int8"]
    argv = argv[1:] if int8 else argv
    if not argv or len(argv) % 2:
        raise SystemExit(__doc__)
    if int8:
        for ir, dst in zip(argv[::2], argv[1::2]):
            compress_int8(ir, dst)
        return
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    with tempfile.TemporaryDirectory() as tmp:
        for i, (src, dst) in enumerate(zip(argv[::2], argv[1::2])):
            root = Path(tmp) / str(i)
            root.mkdir()
            main_export(model_name_or_path=str(staged(src, root)), output=dst,
                        task="text-generation-with-past", ov_config=OVConfig(dtype="fp32"),
                        stateful=True, convert_tokenizer=True, local_files_only=True)


if __name__ == "__main__":
    main(sys.argv[1:])
