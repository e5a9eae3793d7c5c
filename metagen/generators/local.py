"""LocalGenerator: the Generator protocol over metagen's built-in engine (the default backend).

``generate(prompts, params)`` tokenizes every prompt, validates every request against the model
(before any work), queues them all in the engine and runs it until they finish: prompts share the
running batch and the radix prefix cache, and ``n > 1`` samples are forked from one prefill.
A sample whose logits turn NaN/inf ends with ``finish_reason="error"`` and
``stop_reason="numerical_error"``; the other samples are unaffected (RELIABILITY V22/V24).

Usage per call: ``prompt_tokens`` counts each prompt once per request (``n`` samples share one
prefill), ``cached_prompt_tokens`` those served from the prefix cache, ``generated_tokens`` every
sampled token, ``generator_flops`` = 2 x params x tokens computed + attention (recomputation after
preemption included). ``score`` is counted as ``scorer_tokens`` / ``scorer_calls`` /
``scorer_flops``, as the transformers backend does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine, LogitsHook
from metagen.errors import InvalidParameterError, ModelLoadError, NumericalError
from metagen.generators.base import Capabilities, Prompt, check_prompts, render_prompt
from metagen.generators.tokenize import encode_prompt, scored_sequence
from metagen.types import Completion, SamplingParams, Usage


class LocalGenerator:
    """Generator over :class:`~metagen.engine.llm_engine.LLMEngine` (needs its tokenizer)."""

    def __init__(self, engine: LLMEngine, logits_hook: LogitsHook | None = None) -> None:
        if engine.tokenizer is None:
            raise ModelLoadError("LocalGenerator needs an engine with a tokenizer")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        engine.logits_hook = logits_hook
        self._usage = Usage()

    @classmethod
    def from_pretrained(cls, path: str | Path, **engine_options: Any) -> LocalGenerator:
        """Load a Hugging Face folder; ``engine_options`` are :class:`EngineConfig` fields
        (``num_blocks``/``kv_cache_bytes``, ``dtype``, ``device``, ``max_num_seqs``, ...).
        An unsupported architecture raises ``ModelLoadError`` suggesting ``metagen.HFGenerator``."""
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"no model folder at {str(path)!r} (config.json not found)")
        engine = LLMEngine.from_pretrained(folder, EngineConfig(**engine_options))
        if engine.tokenizer is None:
            raise ModelLoadError(f"no tokenizer in {folder}")
        return cls(engine)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(logits=True, logprobs=True, prompt_scoring=True,
                            prefix_cache=self.engine.radix is not None, constraints=True,
                            seeded=True)

    @property
    def usage(self) -> Usage:
        """Cumulative usage of every call so far (see the module docstring)."""
        return self._usage

    @property
    def logits_hook(self) -> LogitsHook | None:
        return self.engine.logits_hook

    @logits_hook.setter
    def logits_hook(self, hook: LogitsHook | None) -> None:
        self.engine.logits_hook = hook

    def _encode_all(self, prompts: Sequence[Prompt], params: Any) -> list[list[int]]:
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        ids = [encode_prompt(self.tokenizer, p) for p in check_prompts(prompts)]
        for p in ids:
            self.engine.validate(p, params)
        return ids

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` completions, from one batched engine run."""
        start = time.perf_counter()
        ids = self._encode_all(prompts, params)
        before = self.engine.stats.snapshot()
        rids = [self.engine.add_request(p, params) for p in ids]
        outs = self.engine.run_until_done(rids)
        after = self.engine.stats
        result = [[self._mark_error(c, e) for c, e in zip(o.outputs, o.errors)] for o in outs]
        self._usage = self._usage + Usage(
            prompt_tokens=after.prompt_tokens - before.prompt_tokens,
            cached_prompt_tokens=after.cached_prompt_tokens - before.cached_prompt_tokens,
            generated_tokens=after.generated_tokens - before.generated_tokens, calls=1,
            generator_flops=after.flops - before.flops, wall_time=time.perf_counter() - start)
        return result

    @staticmethod
    def _mark_error(c: Completion, error: Exception | None) -> Completion:
        if error is None:
            return c
        reason = "numerical_error" if isinstance(error, NumericalError) else type(error).__name__
        return replace(c, finish_reason="error", stop_reason=reason)

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        """Text deltas of the single completion of ``prompt`` (``params.n`` must be 1); a partial
        stop string is never yielded. Stopping the iteration early aborts the request."""
        if params.n != 1:
            raise InvalidParameterError("n", params.n, "stream() streams one completion; use n=1")
        start = time.perf_counter()
        ids = self._encode_all([prompt], params)[0]
        before = self.engine.stats.snapshot()
        try:
            for delta in self.engine.stream(ids, params):
                if delta.error is not None:
                    raise delta.error
                if delta.text:
                    yield delta.text
        finally:
            after = self.engine.stats
            self._usage = self._usage + Usage(
                prompt_tokens=after.prompt_tokens - before.prompt_tokens,
                cached_prompt_tokens=after.cached_prompt_tokens - before.cached_prompt_tokens,
                generated_tokens=after.generated_tokens - before.generated_tokens, calls=1,
                generator_flops=after.flops - before.flops,
                wall_time=time.perf_counter() - start)

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j]`` = log p(continuations[i][j] | prompts[i]) summed over its tokens.

        The scored tokens are those of ``tokenize(prompt + continuation)`` after its longest
        common prefix with the prompt's tokens (a token merging across the boundary is scored),
        as ``HFGenerator.score`` does; an empty continuation scores 0. Prompts shared by several
        continuations are prefilled once (prefix cache)."""
        start = time.perf_counter()
        plist = check_prompts(prompts)
        if isinstance(continuations, (str, bytes)) or len(continuations) != len(plist):
            raise InvalidParameterError("continuations", f"<{len(continuations)} items>",
                                        f"need one list of strings per prompt ({len(plist)})")
        items: list[tuple[list[int], int]] = []
        shape: list[int] = []
        for prompt, conts in zip(plist, continuations):
            if isinstance(conts, (str, bytes)) or not isinstance(conts, Sequence):
                raise InvalidParameterError("continuations", conts,
                                            "each item must be a list of strings")
            ids = encode_prompt(self.tokenizer, prompt)
            text = render_prompt(self.tokenizer, prompt)
            for cont in conts:
                if not isinstance(cont, str):
                    raise InvalidParameterError("continuations", cont, "must be a string")
                items.append(scored_sequence(self.tokenizer, prompt, ids, text, cont))
            shape.append(len(conts))
        before = self.engine.stats.snapshot()
        flat = iter(self.engine.score_sequences(items))
        result = [[next(flat) for _ in range(k)] for k in shape]
        after = self.engine.stats
        self._usage = self._usage + Usage(
            scorer_tokens=after.computed_tokens - before.computed_tokens, scorer_calls=1,
            scorer_flops=after.flops - before.flops, wall_time=time.perf_counter() - start)
        return result
