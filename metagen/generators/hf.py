"""HFGenerator: any ``transformers`` causal LM, decoded by metagen's own processors and sampler.

The reference backend and the fallback for architectures the engine does not cover. Generation
runs through ``model.generate`` (its loop, KV cache and left padding) with one logits processor
that makes every token choice with :func:`metagen.decoding.decode_step` (see
:mod:`metagen.generators.hf_rows`), so the same :class:`~metagen.types.SamplingParams` mean the
same thing here as on the built-in engine: a seeded sample depends only on (seed, sample index),
never on the batch around it. The checkpoint's own ``generation_config`` (a default temperature,
repetition penalty, ...) is ignored on purpose; only its end tokens are kept.

Requests are validated against the model before any work (V14-V17): token ids in
``logit_bias`` / ``allowed_token_ids`` / ``stop_token_ids`` must be below the vocabulary size, and
prompt + ``max_tokens`` must fit the context (``InvalidPromptError`` names both numbers).

Usage accounting: there is no prefix cache, and ``transformers`` prefills every row, so
``prompt_tokens`` counts each prompt ``n`` times (never ``cached_prompt_tokens``);
``generated_tokens`` counts every generated token (EOS and stop tokens included, padding
excluded); ``generator_flops`` is :class:`~metagen.generators.flops.FlopModel`'s estimate per row.
``score`` is counted as ``scorer_tokens`` / ``scorer_calls`` / ``scorer_flops``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from metagen.allowance import Allowance
from metagen.decoding import SequenceState
from metagen.decoding.bad_text import bad_text
from metagen.decoding.grammar import ConstraintSource
from metagen.decoding.healing import heal_prompt, vocab_index
from metagen.device import resolve_device
from metagen.errors import InvalidParameterError, ModelLoadError, UnsupportedArchitectureError
from metagen.generators.base import Capabilities, Prompt, check_prompts
from metagen.generators.flops import FlopModel, flop_model_of
from metagen.generators.hf_budget import RowGuard
from metagen.generators.hf_rows import (
    LogitsHook,
    MetagenLogitsProcessor,
    Row,
    RowTracker,
    TrackerStoppingCriteria,
)
from metagen.generators.metered import MeteredCall, nothing_run, share_call
from metagen.generators.tokenize import (
    check_fits_context, continuation_text, encode_prompt, eos_token_ids)
from metagen.types import Completion, SamplingParams, Usage

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _check_config_file(folder: Path) -> None:
    """Raise ``ModelLoadError`` unless ``folder/config.json`` exists and holds a JSON object."""
    file = folder / "config.json"
    if not file.is_file():
        raise ModelLoadError(f"no model folder at {str(folder)!r} (config.json not found)")
    try:
        cfg = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {file}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ModelLoadError(f"{file}: the config must be a JSON object, not "
                             f"{type(cfg).__name__}")


def _check_like_the_engine(folder: Path) -> None:
    """Refuse what the built-in engine refuses, before transformers reads a weight: for an
    architecture the engine implements, its checks of config.json and every weight (present,
    in its shape, a floating dtype: transformers would cast integer-stored weights to float and
    generate nonsense) raise the same ``ModelLoadError``. An architecture the engine does not
    implement, a ``.bin`` checkpoint and one that declares its own ``quantization_config``
    (whose integer tensors transformers' quantizers read) are left to transformers' checks."""
    from metagen.engine.models.loader import check_checkpoint

    if "quantization_config" in json.loads((folder / "config.json").read_text()):
        return
    try:
        check_checkpoint(folder)
    except UnsupportedArchitectureError:
        return


@contextlib.contextmanager
def _quiet_load_report() -> Iterator[None]:
    """Silence transformers' multi-line load report (missing/unexpected keys) while loading:
    :func:`_check_loading_info` turns what matters in it into one error line."""
    log = logging.getLogger("transformers.modeling_utils")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _check_loading_info(folder: Path, info: dict[str, Any]) -> None:
    """Raise ``ModelLoadError`` when transformers' loading info lists weights the checkpoint
    lacks (they would run with random values) or weights whose shape did not fit."""
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(repr(k) for k in missing[:3])
        raise ModelLoadError(f"{len(missing)} weights the model needs are missing from "
                             f"{folder}: {shown}{', ...' if len(missing) > 3 else ''}")
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    if mismatched:
        name, stored, wanted = mismatched[0]
        raise ModelLoadError(f"{len(mismatched)} weights in {folder} do not have the shape its "
                             f"config.json implies, e.g. {name!r}: {list(stored)} stored, "
                             f"{list(wanted)} expected")
    errors = info.get("error_msgs") or []
    if errors:
        raise ModelLoadError(f"cannot load the weights of {folder}: "
                             f"{str(errors[0]).strip().splitlines()[0]}")


def _one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, with the next one when the first ends in ':'
    (pydantic-style "Validation error for field 'x':" headers), else the type's name."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _refuse_quantization(quantization: object) -> None:
    """``InvalidParameterError`` naming ``quantization`` unless it is None (see
    :meth:`HFGenerator.from_pretrained`)."""
    if quantization is not None:
        raise InvalidParameterError(
            "quantization", quantization, "the hf backend runs the checkpoint's weights as "
            "transformers loads them; int8 / w8a8 / int4 weights run on the built-in engine "
            "(LocalGenerator.from_pretrained(path, quantization=...), backend local)")


def _resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    if dtype is None:
        return "auto"
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise InvalidParameterError("dtype", dtype, f"must be one of {sorted(_DTYPES)} or None")
    return _DTYPES[dtype]


class HFGenerator:
    """Generator over a ``transformers`` causal LM and its tokenizer.

    Build it with :meth:`from_pretrained`, or directly from a loaded ``model`` and ``tokenizer``.
    ``max_batch_rows`` caps how many sequences run through one ``model.generate`` (a call with more
    prompts x n is split; seeded results do not depend on the split). ``logits_hook(logits (A, V),
    seqs) -> logits`` runs on the raw logits before metagen's processors (capability ``logits``).
    A completion whose logits turn NaN/inf ends with ``finish_reason="error"`` and
    ``stop_reason="numerical_error"``; the other completions are unaffected (V22).

    Construction puts ``model`` in eval mode and replaces its ``generation_config`` by a neutral
    one that keeps only the BOS/EOS/PAD ids. Not thread-safe: one call at a time.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_rows: int = 256,
                 logits_hook: LogitsHook | None = None, quantization: str | None = None) -> None:
        from transformers import GenerationConfig

        _refuse_quantization(quantization)
        if not isinstance(max_batch_rows, int) or max_batch_rows < 1:
            raise InvalidParameterError("max_batch_rows", max_batch_rows, "must be an int >= 1")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_rows = max_batch_rows
        self.logits_hook = logits_hook
        self.eos_ids = eos_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0))
        head = model.get_output_embeddings()
        self.vocab_size = int(head.weight.shape[0] if head is not None
                              else model.config.vocab_size)
        self.constraints = ConstraintSource(tokenizer, self.vocab_size, tuple(self.eos_ids))
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
            else model.config
        self.context_length = int(getattr(config, "max_position_embeddings", None)
                                  or tokenizer.model_max_length)
        self.flop_model: FlopModel = flop_model_of(model)
        model.generation_config = GenerationConfig(
            bos_token_id=getattr(model.generation_config, "bos_token_id", None),
            eos_token_id=list(self.eos_ids) or None, pad_token_id=self.pad_id)
        self._usage = Usage()

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu",
                        dtype: str | torch.dtype | None = None, quantization: str | None = None,
                        **kwargs: Any) -> HFGenerator:
        """Load any ``AutoModelForCausalLM`` folder (offline: nothing is downloaded).

        ``quantization`` other than None raises ``InvalidParameterError`` naming it (before
        anything is loaded): this backend runs the weights as transformers loads them; metagen's
        ``int8`` / ``w8a8`` / ``int4`` weights run on the built-in engine (``LocalGenerator``).

        ``dtype`` None keeps the checkpoint's dtype. The device is checked first
        (:class:`~metagen.errors.DeviceUnavailableError`). Raises ``ModelLoadError`` (one line)
        when the folder is missing, its ``config.json`` is not a JSON object, the built-in
        engine's checks refuse it (an architecture the engine implements: the same error as
        the engine's, e.g. for a weight stored as int8), transformers cannot load it, or the
        checkpoint lacks weights the model needs: transformers would fill those with random
        values, so the error names a few of them and their count instead (weights tied to
        another, like a tied LM head, are not missing).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _refuse_quantization(quantization)
        folder = Path(path)
        torch_dtype = _resolve_dtype(dtype)
        device = resolve_device(device)
        _check_config_file(folder)
        _check_like_the_engine(folder)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            with _quiet_load_report():
                # mismatched shapes are reported (and refused) by _check_loading_info
                loaded: Any = AutoModelForCausalLM.from_pretrained(
                    folder, dtype=torch_dtype, local_files_only=True, output_loading_info=True,
                    ignore_mismatched_sizes=True)
            model, info = loaded
        except Exception as exc:  # transformers raises many types; each becomes one line
            raise ModelLoadError(f"cannot load a causal LM from {str(path)!r}: "
                                 f"{_one_line(exc)}") from exc
        _check_loading_info(folder, info)
        return cls(model.to(device), tokenizer, **kwargs)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(logits=True, logprobs=True, prompt_scoring=True, prefix_cache=False,
                            constraints=True, seeded=True)

    @property
    def usage(self) -> Usage:
        """Cumulative usage of every call so far (see the module docstring)."""
        return self._usage

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ generate
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` completions. Validates everything first."""
        return self.generate_metered(prompts, params).completions

    def generate_metered(self, prompts: Sequence[Prompt], params: SamplingParams,
                         allowance: Allowance | None = None) -> MeteredCall:
        """:meth:`generate` within ``allowance``, enforced before every decoding step
        (:mod:`metagen.generators.hf_budget`; the FLOPs become a token pool before the call:
        every row's prefill, then every token at the longest context), with each prompt's
        usage (:mod:`metagen.generators.metered`). When the allowance pays for no token, nothing
        runs (:func:`~metagen.generators.metered.nothing_run`)."""
        start = time.perf_counter()
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        prompt_ids = [encode_prompt(self.tokenizer, p) for p in check_prompts(prompts)]
        self._check_request(prompt_ids, params)
        bad = bad_text(self.tokenizer, params.bad_words)
        matcher = self.constraints.matcher(params)  # compiled before any row runs (V19)
        healed = [heal_prompt(ids, vocab_index(self.tokenizer), params.heal_tokens)
                  if params.heal_tokens else (ids, None) for ids in prompt_ids]
        rows = [Row(i, SequenceState(params=params, prompt_ids=list(ids), sample_index=j,
                                     eos_token_ids=self.eos_ids, bad_text=bad,
                                     constraint=None if matcher is None else matcher.copy(),
                                     heal=heal))
                for i, (ids, heal) in enumerate(healed) for j in range(params.n)]
        guard = None
        if allowance is not None and not allowance.unlimited:
            guard = RowGuard(allowance, rows, self.flop_model, params.max_tokens)
            if guard.runs_nothing:
                return nothing_run(len(prompt_ids), params.n)
        for lo in range(0, len(rows), self.max_batch_rows):
            self._run(rows[lo:lo + self.max_batch_rows], params, guard)
        out: list[list[Completion]] = [[] for _ in prompt_ids]
        own = [Usage() for _ in prompt_ids]
        for row in rows:
            out[row.prompt_index].append(row.completion(self.tokenizer))
            p, g = len(row.seq.prompt_ids), len(row.seq.output_ids)
            own[row.prompt_index] = own[row.prompt_index] + Usage(
                prompt_tokens=p, generated_tokens=g,
                generator_flops=self.flop_model.sequence(p, g))
        usage = share_call(own, 1, time.perf_counter() - start)
        self._usage = self._usage + sum(usage, Usage())
        return MeteredCall(out, usage)

    def beam_search(self, prompts: Sequence[Prompt], params: Any) -> list[list[Completion]]:
        """transformers' beam search (``generate(num_beams=...)``, raw log-probabilities) for
        each prompt: ``params.num_return_sequences`` hypotheses, best first, ``cumulative_logprob``
        the beam score. Diverse (group) and stochastic beams raise: transformers 5 moved group
        beam search out of the library; so do an output constraint and token healing (never
        silently ignored); use the local engine for them."""
        from metagen.beam_params import BeamSearchParams

        start = time.perf_counter()
        if not isinstance(params, BeamSearchParams):
            raise InvalidParameterError("params", params, "must be a BeamSearchParams")
        if params.num_beam_groups > 1 or params.stochastic:
            name = "num_beam_groups" if params.num_beam_groups > 1 else "stochastic"
            raise InvalidParameterError(name, getattr(params, name), "not available on the hf "
                                        "backend (transformers 5 has no group or stochastic "
                                        "beam search); use the local engine")
        if params.constraint is not None or params.token_healing:
            name, value = params.constraint or ("token_healing", params.token_healing)
            raise InvalidParameterError(name, value, "not available in the hf backend's beam "
                                        "search; use the local engine")
        prompt_ids = [encode_prompt(self.tokenizer, p) for p in check_prompts(prompts)]
        self._check_request(prompt_ids, SamplingParams(max_tokens=params.max_tokens))
        out: list[list[Completion]] = []
        generated = 0
        for ids in prompt_ids:
            x = torch.tensor([ids], device=self.device)
            with torch.inference_mode():
                res = self.model.generate(
                    x, attention_mask=torch.ones_like(x), do_sample=False,
                    num_beams=params.num_beams, num_return_sequences=params.num_return_sequences,
                    length_penalty=params.length_penalty, early_stopping=params.early_stopping,
                    max_new_tokens=params.max_tokens, eos_token_id=list(self.eos_ids) or None,
                    pad_token_id=self.pad_id, output_scores=True, return_dict_in_generate=True)
            comps = []
            for seq, score in zip(res.sequences, res.sequences_scores):
                toks = seq[len(ids):].tolist()
                end = next((i for i, t in enumerate(toks) if t in self.eos_ids), None)
                toks = toks if end is None else toks[:end + 1]
                generated += len(toks)
                text = continuation_text(self.tokenizer, ids, toks)
                comps.append(Completion(text=text, token_ids=tuple(toks), logprobs=None,
                                        cumulative_logprob=float(score),
                                        finish_reason="length" if end is None else "stop"))
            out.append(comps)
        self._usage = self._usage + Usage(
            prompt_tokens=sum(len(i) for i in prompt_ids), generated_tokens=generated, calls=1,
            wall_time=time.perf_counter() - start)
        return out

    def _check_request(self, prompt_ids: list[list[int]], params: SamplingParams) -> None:
        vocab = self.vocab_size
        for name, ids in (("logit_bias", list(params.logit_bias or ())),
                          ("allowed_token_ids", list(params.allowed_token_ids or ())),
                          ("stop_token_ids", list(params.stop_token_ids))):
            for tok in ids:
                if tok >= vocab:
                    raise InvalidParameterError(name, tok, f"token id out of the vocabulary "
                                                f"(size {vocab})")
        for ids in prompt_ids:
            check_fits_context(ids, params.max_tokens, self.context_length)

    @torch.inference_mode()
    def _run(self, rows: list[Row], params: SamplingParams, guard: RowGuard | None = None
             ) -> None:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        width = max(len(r.seq.prompt_ids) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros((len(rows), width), dtype=torch.long)                   # (B, T)
        for b, row in enumerate(rows):
            ids = row.seq.prompt_ids
            input_ids[b, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[b, width - len(ids):] = 1
        tracker = RowTracker(rows, self.tokenizer, self.eos_ids, self.pad_id, self.logits_hook,
                             guard)
        self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
            do_sample=False, num_beams=1, max_new_tokens=params.max_tokens,
            logits_processor=LogitsProcessorList([MetagenLogitsProcessor(tracker)]),
            stopping_criteria=StoppingCriteriaList([TrackerStoppingCriteria(tracker)]),
            pad_token_id=self.pad_id)
        for row in rows:  # transformers' own max length may end the loop first
            if row.finish is None:
                row.finish = "length"

    # ------------------------------------------------------------------ score
    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j]`` = log p(continuations[i][j] | prompts[i]), summed over its tokens.

        The scored tokens are those of ``tokenize(prompt + continuation)`` after its longest
        common prefix with the prompt's tokens (tokenized as :meth:`generate` does): usually
        exactly the tokens after the prompt; when a token merges across the boundary (prompt
        ``"... ti"``, continuation ``"me"``) the merged token is scored, conditioned on the
        prompt tokens before it. An empty continuation scores 0.
        """
        from metagen.generators.hf_score import score_pairs

        start = time.perf_counter()
        plist = check_prompts(prompts)
        if isinstance(continuations, (str, bytes)) or len(continuations) != len(plist):
            raise InvalidParameterError("continuations", f"<{len(continuations)} items>",
                                        f"need one list of strings per prompt ({len(plist)})")
        result, tokens, flops = score_pairs(self, plist, continuations)
        self._usage = self._usage + Usage(scorer_tokens=tokens, scorer_calls=1,
                                          scorer_flops=flops,
                                          wall_time=time.perf_counter() - start)
        return result
