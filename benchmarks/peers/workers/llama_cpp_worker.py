"""Engine-benchmark worker for llama.cpp, through llama-cpp-python (run in ``.peers/llama.cpp``).

Models: each Hugging Face folder is converted once to an fp32 GGUF by the converter the sdist
vendors (:mod:`_llama_cpp_convert`), or to Q8_0 / Q4_0 for ``quantization`` "q8_0" / "q4_0"
(the KV cache and attention stay as below: only the weights differ). Every context runs with
``threads`` threads for decode and batch. Precision: by default flash attention is off and the KV cache is fp32 (llama.cpp's default
is fp16), so attention runs in fp32 and the greedy tokens equal fp32 transformers'.
``METAGEN_LLAMA_CPP_FLASH_ATTN=1`` turns flash attention on (as in the issue's 2.8x measurement)
with an fp16 KV cache: llama.cpp's CPU flash attention casts K and V to fp16 whatever the cache
type, and on the full-size target that flips a near-tie (logits 3.6934 vs 3.6927) at the 5th
greedy token of workload A.

Workloads:
- greedy: ``Llama.generate`` with ``temp=0`` (penalty-free greedy sampler); the generator never
  stops on EOS by itself, we take exactly ``max_new`` tokens. The state is reset per call so every
  call prefills its prompt (``generate`` would otherwise reuse a matching cached prefix).
- best_of_n, beam: several sequences on one shared prompt, low-level API (:mod:`_llama_cpp_multi`).
- speculative: ``Llama(draft_model=...)``, the library's draft-and-verify loop inside
  ``generate`` (accept while the target's greedy token equals the draft's; the output is plain
  greedy by construction). ``ngram``: the library's ``LlamaPromptLookupDecoding`` (max n-gram 2,
  as transformers' prompt lookup) proposing ``k`` tokens. ``draft``: a ``LlamaDraftModel`` of ours
  (the interface is the library's; it ships no model-based one) that drafts ``k`` greedy tokens
  with the draft model in a second ``Llama``, which keeps its KV cache across rounds by
  ``generate``'s prefix matching.
"""

from __future__ import annotations

import os
from pathlib import Path

import _llama_cpp_multi as multi
import llama_cpp
import numpy as np
from _llama_cpp_convert import decode_read_bytes, gguf_for
from _serve import Unsupported, Worker, serve
from llama_cpp import _internals as internals
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

FLASH_ATTN = os.environ.get("METAGEN_LLAMA_CPP_FLASH_ATTN", "0") == "1"
KV_TYPE = llama_cpp.GGML_TYPE_F16 if FLASH_ATTN else llama_cpp.GGML_TYPE_F32


class GreedyDraft(LlamaDraftModel):
    """Draft ``k`` greedy tokens of ``llm`` after ``input_ids``; counts rounds and proposals."""

    def __init__(self, llm: llama_cpp.Llama, k: int) -> None:
        self.llm, self.k = llm, k
        self.rounds = self.proposed = 0

    def __call__(self, input_ids: np.ndarray, /, **kwargs: object) -> np.ndarray:
        gen = self.llm.generate(input_ids.tolist(), temp=0.0, repeat_penalty=1.0)
        out = np.array([next(gen) for _ in range(self.k)], dtype=np.intc)
        self.rounds += 1
        self.proposed += len(out)
        return out


class CountingLookup(LlamaPromptLookupDecoding):
    """The library's prompt lookup, counting rounds and proposed tokens."""

    def __init__(self, k: int) -> None:
        super().__init__(max_ngram_size=2, num_pred_tokens=k)
        self.rounds = self.proposed = 0

    def __call__(self, input_ids: np.ndarray, /, **kwargs: object) -> np.ndarray:
        out = super().__call__(input_ids, **kwargs)
        self.rounds += 1
        self.proposed += len(out)
        return out


class LlamaCppWorker(Worker):
    def load(self, paths: dict[str, str], threads: int, quantization: str | None = None) -> None:
        super().load(paths, threads, quantization)
        weights = quantization or "f32"
        self.gguf = {name: str(gguf_for(folder, weights=weights))
                     for name, folder in paths.items()}
        self.llms: dict[tuple[str, str], llama_cpp.Llama] = {}
        self.ctxs: dict[tuple[str, int, int],
                        tuple[internals.LlamaContext, internals.LlamaBatch]] = {}
        for name in paths:
            self.llm(name)

    def llm(self, model: str, purpose: str = "plain", draft: LlamaDraftModel | None = None,
            ) -> llama_cpp.Llama:
        """One ``Llama`` per model and purpose (a draft model fixes ``logits_all`` at
        construction, so speculative decoding gets an instance of its own)."""
        key = (model, purpose)
        if key not in self.llms:
            if model not in self.gguf:
                raise KeyError(f"unknown model {model!r}; loaded: {sorted(self.gguf)}")
            self.llms[key] = llama_cpp.Llama(
                self.gguf[model], n_ctx=0, n_batch=512, n_ubatch=512, n_threads=self.threads,
                n_threads_batch=self.threads, flash_attn=FLASH_ATTN, type_k=KV_TYPE,
                type_v=KV_TYPE, draft_model=draft, verbose=False)
        llm = self.llms[key]
        if draft is not None:
            llm.draft_model = draft
        return llm

    def context(self, model: str, n_seq: int, n_ctx: int, n_batch: int):
        """A cached multi-sequence context (and a batch) big enough for the request."""
        need = -(-n_ctx // 256) * 256
        key = (model, n_seq, max(n_batch, n_seq))
        have = self.ctxs.get(key)
        if have is None or have[0].n_ctx() < need:
            ctx = multi.context(self.llm(model)._model, need, n_seq, key[2], self.threads,
                                FLASH_ATTN, KV_TYPE)
            batch = internals.LlamaBatch(n_tokens=key[2], embd=0, n_seq_max=1, verbose=False)
            self.ctxs[key] = (ctx, batch)
        return self.ctxs[key]

    def decode_read_bytes(self, model: str) -> int:
        return decode_read_bytes(Path(self.gguf[model]))

    @staticmethod
    def take(gen, n: int) -> list[int]:
        return [int(next(gen)) for _ in range(n)]

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        llm = self.llm(model)
        llm.reset()
        return self.take(llm.generate(prompt, temp=0.0, repeat_penalty=1.0), max_new)

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        ctx, batch = self.context(model, n, len(prompt) + n * max_new + 16,
                                  max(len(prompt), n))
        return multi.best_of_n(ctx, batch, prompt, n, max_new, seed)

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        ctx, batch = self.context(model, 2 * width, len(prompt) + 2 * width * (max_new + 1),
                                  max(len(prompt), width))
        return multi.beam(ctx, batch, prompt, width, max_new, self.llm(model).n_vocab())

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        if mode == "ngram":
            proposer: GreedyDraft | CountingLookup = CountingLookup(k)
        elif mode == "draft":
            proposer = GreedyDraft(self.llm("draft"), k)
            proposer.llm.reset()
        else:
            raise Unsupported(f"speculative mode {mode!r}")
        llm = self.llm(model, "speculative", proposer)
        llm.reset()
        out = self.take(llm.generate(prompt, temp=0.0, repeat_penalty=1.0), max_new)
        # verification passes = the prompt's + one per draft call; each yields accepted + 1
        accepted = max(max_new - 1 - proposer.rounds, 0)
        self.last = {"rounds": proposer.rounds,
                     "acceptance_rate": accepted / max(proposer.proposed, 1)}
        return out


if __name__ == "__main__":
    serve(LlamaCppWorker())
