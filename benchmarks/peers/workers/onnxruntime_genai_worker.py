"""onnxruntime-genai as a peer of the engine benchmark (runs in ``.peers/onnxruntime-genai``).

Models are converted on first use by onnxruntime-genai's own model builder (fp32, or int8
weights for ``quantization="int8"``; CPU) with one
extra never-chosen logit column standing in for EOS, so that every workload generates exactly
``max_new`` tokens (see :mod:`_onnxruntime_genai_convert`). Each model is exported twice: with
``prune_lm_head`` (the prefill computes last-position logits only; greedy, best-of-n, beam) and
without (speculative verification needs every position's logits). Workloads map onto its ``Generator``:

- greedy: ``do_sample=False``;
- best-of-n: ``do_sample=True, temperature=1, top_k=<whole vocabulary>, top_p=1`` (sampling from
  the full distribution; measured ~10% faster than its equivalent ``top_k=0, top_p=1``, whose
  nucleus path sorts the vocabulary), ``random_seed=seed``, the prompt repeated in a batch of n rows (at most 32 per
  generator; ``num_return_sequences`` > 1 is for beam search only). The prompt is therefore
  prefilled n times: a prefilled generator cannot be forked (``last["prefill_tokens"]``);
- beam: ``num_beams=width, length_penalty=1, early_stopping=False``, best beam;
- speculative "draft": a composite ``"type": "speculative"`` model (``model`` as decoder, the
  draft as ``model.draft``) with ``max_draft_tokens=k``; "ngram": the plain model with
  ``ngram_size=3`` (the last two tokens are looked up in the committed sequence) and
  ``max_draft_tokens=k``. Both verify greedily, so their output is the model's greedy output.

Every ONNX Runtime session runs with ``intra_op_num_threads=threads`` (the harness's torch
threads) and one inter-op thread.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from _onnxruntime_genai_convert import convert_all, decode_read_bytes
from _serve import Unsupported, Worker, converted_dir, serve

PRECISIONS = {None: "fp32", "int8": "int8", "int4": "int4"}  # quantization -> the builder's -p
NGRAM_SIZE = 3
MAX_ROWS = 32  # onnxruntime-genai: "batch_size must be in [1, 32]"


def speculative_dir(good: Path, draft: Path) -> Path:
    """A composite ``genai_config.json`` over two converted folders (decoder = ``good``, draft =
    ``draft``), written beside them. onnxruntime-genai refuses ``..`` in model paths, so the
    folder links to both (``target/``, ``draft/``) instead of copying their weights."""
    out = good.parent / f"spec-{good.name}--{draft.name}"
    if (out / "genai_config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((good / "genai_config.json").read_text())
    dcfg = json.loads((draft / "genai_config.json").read_text())
    if cfg["model"]["vocab_size"] != dcfg["model"]["vocab_size"]:
        raise ValueError("draft and target vocabularies differ")
    for name, src in (("target", good), ("draft", draft)):
        if not (out / name).exists():
            os.symlink(src.resolve(), out / name)
    decoder, draft_block = cfg["model"]["decoder"], dcfg["model"]["decoder"]
    decoder["filename"] = f"target/{decoder['filename']}"
    draft_block["filename"] = f"draft/{draft_block['filename']}"
    cfg["model"].update(type="speculative", draft=draft_block)
    cfg["speculative"] = {"max_draft_tokens": 4}
    tmp = out / "genai_config.json.tmp"
    tmp.write_text(json.dumps(cfg, indent=2))
    tmp.replace(out / "genai_config.json")
    return out


class OnnxRuntimeGenAIWorker(Worker):
    def load(self, paths: dict[str, str], threads: int, quantization: str | None = None) -> None:
        super().load(paths, threads, quantization)
        import onnxruntime_genai as og

        if quantization not in PRECISIONS:
            raise Unsupported(f"quantization {quantization!r}: use int8 or int4")
        self.og = og
        og.disable_telemetry_events()
        fmt = f"oga-{PRECISIONS[quantization]}-noeos"
        pruned = {k: converted_dir(p, fmt + "-pruned") for k, p in paths.items()}
        full = {k: converted_dir(p, fmt) for k, p in paths.items()}
        convert_all([(paths[k], pruned[k], True) for k in paths]
                    + [(paths[k], full[k], False) for k in paths], PRECISIONS[quantization])
        self.pruned = pruned
        self.models = {k: self._model(d, ("decoder",)) for k, d in pruned.items()}
        self.vocab = {k: json.loads((d / "genai_config.json").read_text())["model"]["vocab_size"]
                      for k, d in pruned.items()}  # V + 1: with the no-EOS column
        self.full = full
        self.verifiers: dict[str, Any] = {}  # full-logit models for speculative decoding
        for model, mode in (("target", "ngram"), ("good_target", "draft")):  # the benchmark's
            if model in paths and (mode != "draft" or "draft" in paths):  # (others: lazily)
                self._verifier(model, mode)

    def decode_read_bytes(self, model: str) -> int:
        return decode_read_bytes(self.pruned[model] / "model.onnx")

    def _verifier(self, model: str, mode: str) -> Any:
        key = f"{model}/{mode}"
        if key not in self.verifiers:
            if mode == "draft":
                self.verifiers[key] = self._model(
                    speculative_dir(self.full[model], self.full["draft"]), ("decoder", "draft"))
            else:
                self.verifiers[key] = self._model(self.full[model], ("decoder",))
        return self.verifiers[key]

    def _model(self, folder: Path, sessions: tuple[str, ...]) -> Any:
        og = self.og
        opts = {"intra_op_num_threads": self.threads, "inter_op_num_threads": 1}
        cfg = og.Config(str(folder))
        cfg.overlay(json.dumps({"model": {s: {"session_options": opts} for s in sessions}}))
        return og.Model(cfg)

    def _run(self, model: Any, prompt: list[int], max_new: int, spec: dict | None = None,
             rows: int = 1, **search: Any) -> Any:
        """Generate until ``len(prompt) + max_new`` (EOS cannot occur) for ``rows`` copies of
        ``prompt`` (one batch) and return the generator."""
        import numpy as np

        og = self.og
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + max_new, batch_size=rows, **search)
        if spec is not None:
            params.set_speculative_options(**spec)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([prompt] * rows, dtype=np.int32))  # (rows, P)
        while not gen.is_done():
            gen.generate_next_token()
        return gen

    @staticmethod
    def _new(gen: Any, i: int, prompt: list[int]) -> list[int]:
        return [int(t) for t in gen.get_sequence(i)[len(prompt):]]

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        gen = self._run(self.models[model], prompt, max_new, do_sample=False)
        return self._new(gen, 0, prompt)

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        outs: list[list[int]] = []
        for chunk, start in enumerate(range(0, n, MAX_ROWS)):  # the generator takes <= 32 rows
            rows = min(MAX_ROWS, n - start)
            gen = self._run(self.models[model], prompt, max_new, rows=rows, do_sample=True,
                            temperature=1.0, top_k=self.vocab[model], top_p=1.0,
                            random_seed=seed + chunk)
            outs += [self._new(gen, i, prompt) for i in range(rows)]
        self.last = {"prefill_tokens": n * len(prompt)}
        return outs

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        gen = self._run(self.models[model], prompt, max_new, do_sample=False, num_beams=width,
                        num_return_sequences=1, length_penalty=1.0, early_stopping=False)
        return self._new(gen, 0, prompt)

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        if mode == "draft":
            if model == "draft" or "draft" not in self.full:
                raise Unsupported(f"no draft model for {model}")
            gen = self._run(self._verifier(model, mode), prompt, max_new, do_sample=False,
                            spec={"max_draft_tokens": k})
        elif mode == "ngram":
            gen = self._run(self._verifier(model, mode), prompt, max_new, do_sample=False,
                            spec={"ngram_size": NGRAM_SIZE, "max_draft_tokens": k})
        else:
            raise Unsupported(f"speculative mode {mode}")
        stats = dict(gen.get_speculative_stats())
        self.last = {"acceptance_rate": stats.get("acceptance_rate"),
                     "rounds": stats.get("rounds")}
        return self._new(gen, 0, prompt)


if __name__ == "__main__":
    serve(OnnxRuntimeGenAIWorker())
