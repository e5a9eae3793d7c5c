"""Converting a benchmark model (a Hugging Face Llama folder without tokenizer files) for
onnxruntime-genai; runs inside the peer's own environment (onnx, tokenizers, the builder).

1. The folder is mirrored (symlinks) into a temporary folder next to a synthetic tokenizer
   (a word-level vocabulary ``<unk> <s> </s> t3 ... t{V-1}``): the model builder loads a tokenizer
   and saves it beside the model, but the benchmark only ever passes token ids.
2. ``python -m onnxruntime_genai.models.builder -i <tmp> -o <out> -p fp32 -e cpu`` (``-p int8``
   for the int8 peer: the builder's weight-only MatMulNBits, 8 bits, with its defaults; with
   ``--extra_options prune_lm_head=true`` for the export used by plain generation).
3. The logits get one extra column fixed at ``NO_EOS_LOGIT`` (an ONNX ``Pad`` after the LM head)
   and ``genai_config.json`` names that column, id ``V``, as the only EOS. onnxruntime-genai has
   no "ignore EOS" option: its ``min_length`` masks the EOS logit (which changes greedy and beam
   output whenever the real EOS would win) and an ``eos_token_id`` outside the vocabulary is
   rejected. A column that can never win (greedy, beam) and has probability 0 (sampling) makes it
   generate exactly ``max_length`` tokens while the model's own V logits are untouched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _serve import mirror_without_tokenizer

NO_EOS_LOGIT = -1.0e30  # exp(NO_EOS_LOGIT - max) == 0 in fp32; finite, so no inf - inf = NaN
DONE = "converted.ok"


def synth_tokenizer(dst: Path, vocab_size: int, max_len: int) -> None:
    """Write ``tokenizer.json`` + ``tokenizer_config.json`` of ``vocab_size`` pieces (ids 0, 1, 2
    are ``<unk>``, ``<s>``, ``</s>`` as in the models' config)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": max_len}))


def pad_logits(model_file: Path, vocab_size: int) -> None:
    """Append the never-chosen column: ``logits (B, S, V) -> (B, S, V + 1)``."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(str(model_file), load_external_data=False)  # weights stay in model.onnx.data
    g = m.graph
    (producer,) = [n for n in g.node if "logits" in n.output]
    producer.output[list(producer.output).index("logits")] = "logits_unpadded"
    g.initializer.extend([
        helper.make_tensor("no_eos_pads", TensorProto.INT64, [6], [0, 0, 0, 0, 0, 1]),
        helper.make_tensor("no_eos_value", TensorProto.FLOAT, [], [NO_EOS_LOGIT])])
    g.node.append(helper.make_node("Pad", ["logits_unpadded", "no_eos_pads", "no_eos_value"],
                                   ["logits"], name="/no_eos/Pad", mode="constant"))
    (out,) = [o for o in g.output if o.name == "logits"]
    last = out.type.tensor_type.shape.dim[-1]
    assert last.dim_value == vocab_size, (last, vocab_size)
    last.dim_value = vocab_size + 1
    onnx.save(m, str(model_file))


# Runs the builder's command line once per job in ONE process: torch and transformers are imported
# once instead of once per model (most of a small model's conversion time).
_BUILD_ALL = """
import runpy, sys, json
for argv in json.loads(sys.argv[1]):
    sys.argv = ["builder"] + argv
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
"""


def convert_all(jobs: list[tuple[str, Path, bool]], precision: str = "fp32") -> None:
    """Convert each ``(hf_folder, out, prune)`` whose ``out`` is not yet converted
    (``converted.ok`` marks a finished one) with ``python -m onnxruntime_genai.models.builder
    -i <hf> -o <out> -p <precision> -e cpu``, plus ``--extra_options prune_lm_head=true`` when
    ``prune``: the prefill then computes the LM head for the last position only, which is all
    plain generation reads but not enough for speculative verification."""
    todo = [(src, out, prune) for src, out, prune in jobs if not (out / DONE).exists()]
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="oga-convert-") as tmp:
        argvs, built = [], []
        for i, (hf_folder, out, prune) in enumerate(todo):
            work = Path(tmp) / str(i)
            cfg = json.loads((Path(hf_folder) / "config.json").read_text())
            src = work / "hf"
            src.mkdir(parents=True)
            mirror_without_tokenizer(hf_folder, src)
            synth_tokenizer(src, int(cfg["vocab_size"]),
                            int(cfg.get("max_position_embeddings", 2048)))
            argvs.append(["-i", str(src), "-o", str(work / "out"), "-p", precision, "-e", "cpu",
                          "-c", str(work / "cache")]
                         + (["--extra_options", "prune_lm_head=true"] if prune else []))
            built.append((hf_folder, out, work / "out", int(cfg["vocab_size"]), prune))
        subprocess.run([sys.executable, "-c", _BUILD_ALL, json.dumps(argvs)], check=True,
                       stdout=sys.stderr, cwd=tmp)
        for hf_folder, out, staged, vocab, prune in built:
            pad_logits(staged / "model.onnx", vocab)
            gcfg_file = staged / "genai_config.json"
            gcfg = json.loads(gcfg_file.read_text())
            gcfg["model"].update(vocab_size=vocab + 1, eos_token_id=vocab, pad_token_id=0)
            gcfg_file.write_text(json.dumps(gcfg, indent=2))
            (staged / DONE).write_text(json.dumps({"source": str(hf_folder), "prune": prune}))
            if out.exists():
                shutil.rmtree(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged), str(out))


def decode_read_bytes(model_file: Path) -> int:
    """Bytes of the model's initializers, each as stored (MatMulNBits' packed weights, scales
    and zero points included), but those a Gather reads one row of per token (the input
    embedding): what a batch-1 decode step streams."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    m = onnx.load(str(model_file), load_external_data=False)
    gathered = {i for n in m.graph.node if n.op_type.startswith("Gather") for i in n.input}

    def size(t: onnx.TensorProto) -> int:
        if uses_external_data(t):
            return int({e.key: e.value for e in t.external_data}["length"])
        return numpy_helper.to_array(t).nbytes

    return sum(size(t) for t in m.graph.initializer if t.name not in gathered)
