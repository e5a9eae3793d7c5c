"""Constrained decoding cost: engine tokens/s with a JSON-schema constraint vs without.

``python -m benchmarks.constrained_bench [--quick] [--json PATH] [--repeats R]``

The model is a deterministic random-weight Llama (``benchmarks.factory`` sizes: hidden 512,
8 layers, fp32) over a byte-level BPE tokenizer trained here on the GSM8K training questions
(32000 tokens, or the most the text gives), so the grammar mask covers a realistic vocabulary.
Each round runs batch 1 and batch 16, constrained and unconstrained, interleaved (the machine is
shared); the report is the median tokens/s of each cell and the constrained / unconstrained ratio.
Both sides sample (temperature 1, seeded) ``max_tokens`` tokens per row: EOS is ignored on the free
side, and the schema's ``minItems`` keeps every constrained document open past ``max_tokens``, so
both sides decode the same number of tokens at the same batch size. ``--quick`` is the
tiny stories260K model (vocab 512) with 2 rounds: a smoke run, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.factory import _config, _random_model

SCHEMA = {"type": "array", "minItems": 100, "items": {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}}
ROOT = Path(__file__).resolve().parent.parent


def build(cache: Path, vocab: int = 32000) -> Path:
    """A random Llama (factory sizes, fp32) with a BPE tokenizer trained on GSM8K (cached)."""
    out = cache / f"constrained_v{vocab}"
    if (out / "model.safetensors").exists():
        return out
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    texts = [json.loads(line)["question"] for line in
             (ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl").read_text().splitlines()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(out)
    cfg = _config(512, 8, 8, 1376, len(fast), 2048)
    _random_model(cfg, seed=0).save_pretrained(out)
    return out


def run_cell(engine: Any, prompts: list[list[int]], constrained: bool, max_tokens: int) -> float:
    from metagen.types import SamplingParams
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=max_tokens,
                             **({"json_schema": SCHEMA} if constrained else {"ignore_eos": True}))
              for i in range(len(prompts))]
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    wall = time.perf_counter() - start
    if constrained:  # every document is a prefix of the language's strings, never finished
        assert all(o.outputs[0].finish_reason == "length" for o in outs)
        assert all(o.outputs[0].text.startswith("[") for o in outs)
    return sum(len(o.outputs[0].token_ids) for o in outs) / wall


def mask_ms(engine: Any, batch: int, reps: int = 30) -> float:
    """Median ms of the constraint stage alone (sync + fill + unpack + masked_fill) for
    ``batch`` rows in the middle of a document, on random (B, V) logits."""
    from metagen.decoding.constraint_mask import apply_constraints
    from metagen.decoding.state import SequenceState
    from metagen.types import SamplingParams
    params = SamplingParams(json_schema=SCHEMA)
    comp = engine.constraints.compiler
    ids = comp.tokenizer.tokenize_str('[{"name":"Tom","age":12,"tags":["a"]},{"name":"Li')
    states = [SequenceState(params, [1], list(ids), eos_token_ids=engine.eos_token_ids,
                            constraint=comp.matcher(params.constraint)) for _ in range(batch)]
    logits = torch.randn(batch, engine.vocab_size)
    apply_constraints(logits, states)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        apply_constraints(logits, states)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--cache", type=Path, default=Path(".bench_cache"))
    args = ap.parse_args(argv)
    from metagen.engine.llm_engine import LLMEngine
    import llguidance
    path = ROOT.parent / "shared" / "models" / "stories260K" if args.quick else build(args.cache)
    repeats = 2 if args.quick else args.repeats
    engine = LLMEngine.from_pretrained(path, device="cpu", num_blocks=2048, block_size=16)
    texts = [f"Question {i}: how many apples does Tom have?" for i in range(16)]
    prompts = [engine.tokenizer(t)["input_ids"] for t in texts]
    run_cell(engine, prompts[:2], True, 8)  # warm-up: compile the grammar, touch the kernels
    run_cell(engine, prompts[:2], False, 8)
    cells: dict[str, list[float]] = {}
    masks: dict[str, list[float]] = {}
    for _ in range(repeats):
        for batch in (1, 16):
            masks.setdefault(f"b{batch}", []).append(mask_ms(engine, batch))
        for batch in (1, 16):
            for constrained in (False, True):
                key = f"b{batch}_{'json' if constrained else 'free'}"
                cells.setdefault(key, []).append(
                    run_cell(engine, prompts[:batch], constrained, args.max_tokens))
    med = {k: statistics.median(v) for k, v in cells.items()}
    result = {
        "what": "engine tokens/s, JSON-schema constrained vs unconstrained (medians)",
        "model": str(path.name), "vocab": engine.vocab_size, "max_tokens": args.max_tokens,
        "repeats": repeats, "threads": torch.get_num_threads(), "machine": platform.machine(),
        "llguidance": llguidance.__version__ if hasattr(llguidance, "__version__") else "?",
        "tokens_per_s": cells, "median_tokens_per_s": med,
        "mask_stage_ms": masks,
        "median_mask_stage_ms": {k: statistics.median(v) for k, v in masks.items()},
        "median_step_ms_free": {f"b{b}": 1e3 * b / med[f"b{b}_free"] for b in (1, 16)},
        "ratio_constrained_over_free": {f"b{b}": med[f"b{b}_json"] / med[f"b{b}_free"]
                                        for b in (1, 16)},
    }
    for b in (1, 16):
        print(f"batch {b:2d}: free {med[f'b{b}_free']:8.1f} tok/s   json {med[f'b{b}_json']:8.1f}"
              f" tok/s   ratio {result['ratio_constrained_over_free'][f'b{b}']:.3f}   mask stage "
              f"{result['median_mask_stage_ms'][f'b{b}']:.2f} ms / step "
              f"{result['median_step_ms_free'][f'b{b}']:.1f} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
