"""LLMEngine: continuous-batching generation over the paged KV cache.

Loop of one :meth:`LLMEngine.step`: propose (speculative drafts) -> schedule (admit, chunk,
preempt) -> run (``ModelRunner.extend``, then each row's logits to its consumer: sampling with
per-row parameters through ``metagen.decoding.decode_step``, scoring, verification, a request's
driver) -> postprocess (stop rules as tokens are emitted, finished requests' outputs:
:mod:`metagen.engine.postprocess`). Requests are added with
:meth:`add_request` (validated at once; a bad request raises and never enters a batch) and leave
when finished or :meth:`abort`-ed. ``n > 1`` prefills the prompt once and forks ``n`` samples
that share its blocks (copy-on-write on the last partial block). Single-threaded: one caller
drives the engine.

Batch composition: a request's logits, scores and log-probabilities do not depend on which other
requests share its steps, its chunking or its prefix-cache hits beyond float32 rounding -- not
bitwise, because the kernel a product takes depends on the step's shape (the native few-row
kernels, MKL on one thread, MKL split across threads, a GPU's) and each sums in its own order.
Tests hold scores to a relative 1e-5 of their value alone (``BATCH_RTOL``). Greedy and seeded
samples are therefore the same tokens in any batch unless two candidates' probabilities lie
within that rounding of each other. ``EngineConfig(deterministic=True)`` makes them bitwise:
every step through the batch-invariant native kernels (:mod:`metagen.engine.invariant`).

Beam search and speculative decoding run inside this loop, on this one core (one block manager,
one radix cache, one runner). The engine is handed them, and its scorer, as
:class:`~metagen.engine.engine_parts.EngineDrivers` (:mod:`metagen.engine.build` makes the
standard ones from an EngineConfig) and imports none of them; its model is any
:class:`~metagen.engine.models.interface.CausalLM` (the architecture table:
:mod:`metagen.engine.models.registry`):

- a request added with :class:`~metagen.beam_params.BeamSearchParams` carries a *driver*
  (:mod:`metagen.engine.request_driver`): its rows' logits go to the driver, which advances the
  beams with :meth:`fork`, :meth:`extend` and :meth:`finish` (:mod:`metagen.engine.beam_search`);
- an engine built with a speculator (``EngineConfig.speculative_model`` or ``prompt_lookup``,
  or ``build_engine(..., speculator=)``) drafts tokens onto its decoding rows before
  scheduling, the step computes them with all-position logits, and the speculator accepts a
  prefix and emits the tokens through the same append path as sampling
  (:mod:`metagen.engine.speculative_decoding`).

``logits_hook`` (a callable ``(logits (B, V), states) -> logits``, ``states`` the rows'
SequenceStates) sees the raw logits of sampled and verified rows before processing (tests use it
to inject NaN); beam rows do not go through it. It is called once per step for all those rows
and must be row-wise, as the rest of the step is: a row's result depends on its own logits and
state only. A hook that raises fails only the requests it raises for (see
:meth:`LLMEngine.apply_logits_hook`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from metagen.beam_params import BeamSearchParams
from metagen.decoding import SequenceState, decode_step
from metagen.decoding.processors import plain_greedy
from metagen.decoding.sampler import greedy_step
from metagen.decoding.grammar import ConstraintSource
from metagen.decoding.healing import heal_prompt, vocab_index
from metagen.decoding.bad_text import bad_text
from metagen.engine.block_manager import BlockManager
from metagen.engine.config import DEFAULT_KV_CACHE_BYTES, EngineConfig
from metagen.engine.detokenizer import Detokenizer
from metagen.engine.draft_tree import leaf_gaps
from metagen.engine import engine_drivers
from metagen.engine.engine_parts import EngineDrivers, Scorer
from metagen.engine.kv_cache import KVCache, bytes_per_block
from metagen.engine.kv_window import held_blocks, longest_sequence, released_blocks
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.interface import CausalLM
from metagen.engine.models.quantize import quantization_of, stores
from metagen.engine.native.sample_rows import SampleRows, load as load_sample_rows
from metagen.engine.native.threads import torch_inline, torch_threads
from metagen.engine.outputs import EngineSnapshot, EngineStats, RequestOutput, StreamDelta
from metagen.engine.postprocess import collect_finished, finish_sequence, stop_rule
from metagen.engine.radix_cache import RadixCache
from metagen.engine.row_logits import stack_rows
from metagen.engine.score_rows import collect_scores
from metagen.engine.scheduler import Scheduler
from metagen.engine.sequence import Request, Sequence as Seq, Status
from metagen.engine.validation import (
    check_beam_params, check_first_sample, check_params, check_prompt_ids, context_limit)
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

DEFAULT_KV_BYTES = DEFAULT_KV_CACHE_BYTES
BATCH_RTOL = 1e-5  # see "Batch composition" in the module docstring
LogitsHook = Callable[[torch.Tensor, Sequence[SequenceState]], torch.Tensor]


class LLMEngine:
    """The built-in engine. ``tokenizer`` (optional) enables text, stop strings and bad words.
    ``drivers`` are its speculator, beam-search and scoring parts (none by default: such
    requests are refused); :func:`metagen.engine.build.build_engine` and
    :meth:`from_pretrained` hand it the standard ones, built from ``config``."""

    def __init__(self, model: CausalLM, tokenizer: Any = None,
                 config: EngineConfig | None = None,
                 drivers: EngineDrivers | None = None) -> None:
        cfg = config or EngineConfig()
        mc = model.cfg
        if not stores(model, cfg.quantization):
            raise InvalidParameterError(
                "quantization", cfg.quantization, f"the model's projections are stored as "
                f"{quantization_of(model) or 'loaded'}: quantization applies when loading "
                "(LLMEngine.from_pretrained, or load_model(..., quantization=...))")
        self.model, self.tokenizer, self.config = model, tokenizer, cfg
        bs = cfg.block_size
        max_len = min(cfg.max_model_len or model.max_positions, model.max_positions,
                      mc.sliding_window or model.max_positions)
        kv_dtype = cfg.kv_torch_dtype(model.dtype)
        per_block = bytes_per_block(mc.num_layers, bs, mc.num_kv_heads, mc.head_dim, kv_dtype)
        if cfg.num_blocks is not None:
            num_blocks = cfg.num_blocks
        elif cfg.kv_cache_bytes is not None:
            num_blocks = cfg.kv_cache_bytes // per_block
        else:
            num_blocks = min(DEFAULT_KV_BYTES // per_block, -(-cfg.max_num_seqs * max_len // bs))
        if num_blocks < 2:
            raise InvalidParameterError("kv_cache_bytes", cfg.kv_cache_bytes,
                                        f"too small: one block needs {per_block} bytes")
        self.max_model_len = longest_sequence(max_len, num_blocks, bs, cfg.kv_sink_tokens,
                                              cfg.kv_window_tokens, cfg.max_num_batched_tokens)
        mpe = mc.max_position_embeddings  # the model's own context (its RoPE tables may be
        model_len = min(cfg.max_model_len or mpe, mpe, mc.sliding_window or mpe)  # KV-capped)
        self.context_limit = context_limit(self.max_model_len, model_len, num_blocks, bs)
        self.kv = KVCache(mc.num_layers, num_blocks, bs, mc.num_kv_heads, mc.head_dim,
                          kv_dtype, model.device)
        self.blocks = BlockManager(num_blocks, bs)
        self.radix = RadixCache(self.blocks) if cfg.prefix_cache else None
        self.scheduler = Scheduler(cfg, self.blocks, self.radix, self.kv.copy_blocks)
        self.runner = ModelRunner(model, self.kv, hydragen=cfg.hydragen,
                                  hydragen_min_prefix=cfg.hydragen_min_prefix,
                                  deterministic=cfg.deterministic)
        eos = set(mc.eos_token_ids)
        if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        self.eos_token_ids = tuple(sorted(eos))
        # count_compute's terms: 2 N per token, 4 L H d per token of context it attends
        self._flops_per_token = 2.0 * mc.num_params
        self._flops_per_context = 4.0 * mc.num_layers * mc.num_heads * mc.head_dim
        self.requests: dict[str, Request] = {}
        self.seqs: dict[int, Seq] = {}
        self.counters = EngineStats()  # cumulative; the state between steps: stats()
        self.logits_hook: LogitsHook | None = None
        self._threads = torch.get_num_threads()  # torch's count at the current step's call
        # sampling's passes over the vocabulary in C, on the step's threads (CPU only)
        self._sample_rows = load_sample_rows() if model.device.type == "cpu" else None
        self._ids = itertools.count()
        self._req_ids = itertools.count()
        self.drivers = drivers or EngineDrivers()
        speculator = self.drivers.speculator
        if speculator is not None and cfg.kv_window_tokens is not None:
            raise InvalidParameterError("speculator", speculator, "cannot be combined with a KV "
                                        "window (EngineConfig.kv_window_tokens)")
        self.speculator = speculator
        self._scorer = None if self.drivers.scorer is None else self.drivers.scorer(self)
        self.constraints = ConstraintSource(tokenizer, self.vocab_size, self.eos_token_ids)

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None,
                        tokenizer: Any = None, **options: Any) -> LLMEngine:
        """Load a Hugging Face folder with the standard drivers: see
        :func:`metagen.engine.build.load_engine` (``options`` are :class:`EngineConfig` fields;
        ``tokenizer=False``: none)."""
        from metagen.engine.build import load_engine  # the factory imports the engine

        return load_engine(path, config, tokenizer, **options)

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    # -- requests -------------------------------------------------------------------------------

    def validate(self, prompt_ids: Any, params: Any
                 ) -> tuple[list[int], SamplingParams | BeamSearchParams]:
        """Raise InvalidPromptError / InvalidParameterError for a request the engine cannot serve."""
        ids = check_prompt_ids(prompt_ids, self.vocab_size, self.max_model_len,
                               limit=self.context_limit)
        if isinstance(params, BeamSearchParams):
            if self.drivers.beam is None:
                raise InvalidParameterError("params", params, "beam search needs an engine "
                                            "built with a beam driver (build_engine)")
            cfg = self.config
            held = held_blocks(len(ids) + params.max_tokens, cfg.block_size, cfg.kv_sink_tokens,
                               cfg.kv_window_tokens, cfg.max_num_batched_tokens)
            beam = check_beam_params(params, len(ids), self.max_model_len, held,
                                     self.blocks.num_blocks, self.tokenizer is not None,
                                     self.context_limit)
            self.constraints.check(beam)
            return ids, beam
        checked = check_params(params, len(ids), self.vocab_size, self.max_model_len,
                               self.tokenizer is not None, self.context_limit)
        self.constraints.check(checked)  # compiled (and cached) now: rejected at request time
        return ids, checked

    def add_request(self, prompt_ids: Sequence[int],
                    params: SamplingParams | BeamSearchParams | None = None,
                    request_id: str | None = None, first_sample: int = 0) -> str:
        """Queue a request; returns its id. Validates first. ``SamplingParams``: ``n`` samples,
        sample ``j`` drawing as sample ``first_sample + j`` of the seed (so ``n`` requests of one
        sample with ``first_sample`` 0, 1, ... give the samples of one request with ``n``);
        ``BeamSearchParams``: one beam search whose output holds ``num_return_sequences``
        hypotheses (see :mod:`metagen.engine.beam_search`). With ``token_healing`` the request
        runs on the prompt without its healed tokens (the output's ``prompt_ids``), and its
        samples (beams) re-produce their text first (:mod:`metagen.decoding.healing`)."""
        ids, checked = self.validate(prompt_ids, params or SamplingParams())
        check_first_sample(first_sample)
        rid = request_id if request_id is not None else self.new_request_id("req")
        if rid in self.requests:
            raise InvalidParameterError("request_id", rid, "is already in use")
        matcher = self.constraints.matcher(checked)
        heal = None
        if checked.heal_tokens:  # the request runs on the kept ids (see SamplingParams)
            ids, heal = heal_prompt(ids, vocab_index(self.tokenizer), checked.heal_tokens)
        healed = heal.removed_ids if heal else ()
        if isinstance(checked, BeamSearchParams):
            sp = SamplingParams(temperature=0.0, max_tokens=checked.max_tokens, ignore_eos=True)
            assert self.drivers.beam is not None  # validate refused the request otherwise
            req = Request(rid, ids, sp, driver=self.drivers.beam(
                checked, self.eos_token_ids, self.tokenizer, ids, healed))
            self.enqueue(req, SequenceState(sp, list(ids), constraint=matcher, heal=heal),
                         Detokenizer(None, ()))
            return rid
        req = Request(rid, ids, checked, first_sample=first_sample)
        state = SequenceState(checked, list(ids), sample_index=first_sample,
                              eos_token_ids=self.eos_token_ids,
                              constraint=matcher, heal=heal,
                              bad_text=bad_text(self.tokenizer, checked.bad_words))
        seq = self.enqueue(req, state, Detokenizer(self.tokenizer, ids, checked.stop, healed))
        seq.pending_fork = checked.n - 1
        return rid

    def new_request_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._req_ids)}"

    def enqueue(self, req: Request, state: SequenceState, detok: Detokenizer) -> Seq:
        """Register ``req`` (already validated) with its first sequence, prompt only, waiting."""
        seq = self._new_seq(req, state, list(req.prompt_ids), detok)
        self.requests[req.request_id] = req
        self.counters.prompt_tokens += len(req.prompt_ids)
        self.counters.requests += 1
        self.scheduler.add(seq)
        return seq

    @property
    def scorer(self) -> Scorer:
        """The scoring façade handed in (``drivers.scorer``); InvalidParameterError without."""
        if self._scorer is None:
            raise InvalidParameterError("drivers", self.drivers, "scoring needs an engine built "
                                        "with a scorer (build_engine)")
        return self._scorer

    def add_scoring_request(self, tokens: list[int], score_from: int, top: int | None = None
                            ) -> str:
        """See :meth:`~metagen.engine.engine_scoring.EngineScorer.add_scoring_request`."""
        return self.scorer.add_scoring_request(tokens, score_from, top)

    def score(self, prompts: Any, continuations: Any, *, errors: Any = "raise") -> list[list[Any]]:
        """See :meth:`~metagen.engine.engine_scoring.EngineScorer.score`."""
        return self.scorer.score(prompts, continuations, errors=errors)

    def score_sequences(self, items: Any, *, errors: Any = "raise", run: Any = None
                        ) -> list[Any]:
        """See :meth:`~metagen.engine.engine_scoring.EngineScorer.score_sequences`."""
        return self.scorer.score_sequences(items, errors=errors, run=run)

    def _new_seq(self, req: Request, state: SequenceState, tokens: list[int],
                 detok: Detokenizer) -> Seq:
        seq = Seq(next(self._ids), req, state, tokens, detok, greedy=plain_greedy(state))
        req.seqs.append(seq)
        req.num_unfinished += 1
        self.seqs[seq.seq_id] = seq
        return seq

    def fork(self, seq_id: int, n: int) -> list[int]:
        """``n`` new samples continuing sequence ``seq_id``; they share its KV blocks (refcounts,
        copy-on-write on write) and get the next sample indices of its request."""
        parent = self.seqs[seq_id]
        if parent.is_finished:
            raise InvalidParameterError("seq_id", seq_id, "is finished")
        out, after = [], parent
        for _ in range(n):
            index = parent.request.first_sample + len(parent.request.seqs)
            child = self._new_seq(parent.request, parent.state.fork(index),
                                  list(parent.token_ids), parent.detok.copy())
            child.logprobs, child.top_logprobs = list(parent.logprobs), list(parent.top_logprobs)
            child.prompt_cached = parent.prompt_cached
            if parent.status is Status.RUNNING:
                child.block_table = list(parent.block_table)
                child.dropped_blocks = parent.dropped_blocks
                child.num_computed_tokens = parent.num_computed_tokens
                self.blocks.incref(child.block_table)
                self.scheduler.add_running(child, after=after)
            else:
                self.scheduler.add(child)
            after = child
            out.append(child.seq_id)
        return out

    def truncate(self, seq_id: int, num_tokens: int, then: Sequence[int] = ()) -> None:
        """Roll sequence ``seq_id`` back to its first ``num_tokens`` tokens (prompt included),
        then append ``then``: drops later output tokens, their logprobs and the KV past the kept
        tokens (mirostat state is not rolled back). The KV of kept tokens stays; when nothing is
        left to compute, the last kept token is recomputed (its logits give the next token).
        A draft model's proposer uses it to follow the target's accepted tokens. With a KV
        window, rolling back to where the next token would attend to blocks already dropped
        raises :class:`~metagen.errors.InvalidParameterError` (changing nothing)."""
        seq = self.seqs[seq_id]
        if seq.is_finished or seq.num_draft or \
                not seq.num_prompt_tokens <= num_tokens <= len(seq.token_ids):
            raise InvalidParameterError("num_tokens", num_tokens, "must be within a live "
                                        "sequence's output (prompt length .. current length)")
        self._check_window_rollback(seq, num_tokens, len(then))
        keep_out = num_tokens - seq.num_prompt_tokens
        del seq.token_ids[num_tokens:], seq.state.output_ids[keep_out:]
        del seq.logprobs[keep_out:], seq.top_logprobs[keep_out:]
        seq.num_computed_tokens = min(seq.num_computed_tokens, num_tokens)
        seq.token_ids.extend(then)
        seq.state.output_ids.extend(then)
        if seq.num_computed_tokens == len(seq.token_ids):
            seq.num_computed_tokens -= 1
        self.release_tail(seq)
        seq.detok.searched = 0
        seq.detok.update(seq.state.output_ids, check_stop=False)

    def _check_window_rollback(self, seq: Seq, num_tokens: int, appended: int) -> None:
        """Raise unless the token ``truncate(seq, num_tokens, then)`` leaves to compute next
        attends only to blocks ``seq`` still holds (no KV window: always)."""
        cfg = self.config
        computed = min(seq.num_computed_tokens, num_tokens)
        if computed == num_tokens + appended:  # as truncate: the last token is recomputed
            computed -= 1
        if released_blocks(computed + 1, cfg.block_size, cfg.kv_sink_tokens,
                           cfg.kv_window_tokens) < seq.dropped_blocks:
            raise InvalidParameterError(
                "num_tokens", num_tokens, f"rolls back past the KV window: the sequence "
                f"dropped the KV of {seq.dropped_blocks} block(s) that its next token would "
                "attend to")

    def release_tail(self, seq: Seq) -> None:
        """Free the blocks of ``seq`` past those its tokens occupy."""
        keep_blocks = -(-max(seq.num_computed_tokens, len(seq.token_ids)) //
                        self.config.block_size) - seq.dropped_blocks
        if len(seq.block_table) > keep_blocks:
            self.blocks.free(seq.block_table[keep_blocks:])
            del seq.block_table[keep_blocks:]

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``seq_id`` as given output (no sampling, no stop checks);
        the next step computes them. For drivers (a beam's chosen token, a draft)."""
        seq = self.seqs[seq_id]
        if seq.is_finished:
            raise InvalidParameterError("seq_id", seq_id, "is finished")
        seq.token_ids.extend(tokens)
        seq.state.output_ids.extend(tokens)
        self.counters.generated_tokens += len(tokens)
        seq.request.generated_tokens += len(tokens)

    def finish(self, seq_id: int, reason: str = "stop") -> None:
        """End sequence ``seq_id`` (its full computed blocks go to the prefix cache)."""
        seq = self.seqs[seq_id]
        if not seq.is_finished:
            self._finish(seq, reason)

    def stats(self) -> EngineSnapshot:
        """The engine's state between two steps, the public read for monitoring (the server's
        ``/metrics``): sequences running and waiting, KV blocks, prompt counters. Call it from
        the thread that drives the engine (the loop's ``call``), never during a step. The
        cumulative compute counters are :attr:`counters` (:class:`EngineStats`)."""
        radix = self.radix
        return EngineSnapshot(
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting),
            blocks_free=self.blocks.num_free, blocks_total=self.blocks.num_blocks,
            prompt_tokens=self.counters.prompt_tokens,
            cached_prompt_tokens=self.counters.cached_prompt_tokens,
            blocks_cached=len(radix.cached_blocks()) if radix is not None else 0,
            blocks_in_requests=len({b for seq in self.seqs.values() for b in seq.block_table}))

    def abort(self, request_id: str) -> None:
        """Stop a request now: its sequences leave the batch and free their blocks."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return
        for seq in req.seqs:
            seq.pending_fork = 0
            if not seq.is_finished:
                self._finish(seq, "abort")
            self.seqs.pop(seq.seq_id, None)

    def stop_early(self, request_id: str, seq_ids: Collection[int] | None = None,
                   stop_reason: str = "budget") -> RequestOutput | None:
        """End sequences of sampling request ``request_id`` now, between steps, keeping what they
        generated: ``finish_reason`` "length" and ``stop_reason``. ``seq_ids`` None ends every
        unfinished one; ending a sequence also drops the samples it was still to fork, so the
        output may hold fewer than ``n`` completions. Returns the request's output once all its
        sequences have finished (it then leaves the engine, as after a step), else None."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        for seq in req.seqs:
            if not seq.is_finished and (seq_ids is None or seq.seq_id in seq_ids):
                seq.pending_fork = 0
                self._finish(seq, "length", stop_reason)
        done = collect_finished([req], self.requests, self.seqs, self.counters)
        return done[0] if done else None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # -- single-caller drivers (see metagen.engine.engine_drivers; many callers: engine.loop) --

    def generate(self, prompts: Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        return engine_drivers.generate(self, prompts, params)

    def run_until_done(self, request_ids: Sequence[str]) -> list[RequestOutput]:
        return engine_drivers.run_until_done(self, request_ids)

    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None
               ) -> Iterator[StreamDelta]:
        return engine_drivers.stream(self, prompt_ids, params)

    # -- the loop -------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One step: propose -> schedule -> run -> postprocess. The speculator proposes drafts
        onto decoding rows; the scheduler picks the rows and their new tokens (admitting,
        chunking, preempting) and drafts past that are dropped; the runner computes them and each
        row whose logits are ready goes to its consumer (:meth:`_consume`: scoring, speculative
        verification, its request's driver, or sampling -- stop rules apply as each token is
        emitted); postprocess returns the requests the step finished
        (:func:`~metagen.engine.postprocess.collect_finished`).

        If the step raises (a ``KeyboardInterrupt`` in the forward or in a ``logits_hook``),
        every request with a sequence in its batch is aborted -- its blocks freed, none of them
        put in the prefix cache -- and the exception propagates: the engine is consistent
        (``check_integrity`` holds) and serves the other requests at the next step."""
        if self.speculator is not None:
            self.speculator.propose(self)  # propose: drafts onto running decoding rows
        batch = self.scheduler.schedule()  # schedule
        if self.speculator is not None:
            self.speculator.fit(batch)  # drafts past what was scheduled are dropped
        self.counters.preemptions = self.scheduler.num_preemptions
        if not batch:
            return []
        self.counters.steps += 1
        try:
            reqs, logits = self._run(batch)  # run: the forward
            touched = self._consume(batch, reqs, logits)  # each ready row to its consumer
        except BaseException as exc:
            self._fail_batch(batch, exc)
            raise
        return collect_finished(touched, self.requests, self.seqs, self.counters)  # postprocess

    def _fail_batch(self, batch: list[tuple[Seq, int]], exc: BaseException) -> None:
        """Abort every request with a sequence in ``batch``, its live sequences failed with
        ``exc`` (a ``RuntimeError`` wrapping it when it is not an ``Exception``)."""
        failed = exc if isinstance(exc, Exception) else \
            RuntimeError(f"the step was interrupted: {exc!r}")
        for req in {id(s.request): s.request for s, _ in batch}.values():
            for seq in req.seqs:
                if not seq.is_finished:
                    seq.error = failed  # never cache blocks whose KV this step may have torn
            self.abort(req.request_id)

    def _run(self, batch: list[tuple[Seq, int]]
             ) -> tuple[list[ExtendRequest], list[torch.Tensor]]:
        """Forward the scheduled ``(sequence, new tokens)`` pairs: their extend rows and each
        row's logits (see :meth:`ModelRunner.extend`)."""
        bs = self.config.block_size
        reqs: list[ExtendRequest] = []
        for s, n in batch:  # (loops, not comprehensions, on the per-token path: cheaper)
            done = s.num_computed_tokens
            reqs.append(ExtendRequest(s.block_table, done - s.dropped_blocks * bs,
                                      s.token_ids[done:done + n],
                                      s.score_from is not None or s.num_draft > 0,
                                      s.dropped_blocks * bs,
                                      leaf_gaps(s.num_draft, s.draft_leaves) if s.draft_leaves
                                      else ()))
        return reqs, self.runner.extend(reqs)

    def _consume(self, batch: list[tuple[Seq, int]], reqs: list[ExtendRequest],
                 logits: list[torch.Tensor]) -> list[Request]:
        """Advance the computed rows and hand each row whose logits are ready to its consumer:
        scoring, speculative verification, its request's driver, or sampling; the requests of
        the batch, in batch order, are returned for postprocessing."""
        rows: list[Seq] = []
        row_logits: list[torch.Tensor] = []
        verify: list[tuple[Seq, torch.Tensor]] = []
        driven: dict[int, tuple[Any, list[Seq], list[torch.Tensor]]] = {}
        touched: list[Request] = []
        for (seq, n), lg, r in zip(batch, logits, reqs):
            start = seq.num_computed_tokens
            seq.num_computed_tokens += n
            self.count_compute(seq.request, r.num_cached, n)
            touched.append(seq.request)
            if seq.score_from is not None:
                if collect_scores(seq, start, lg):
                    self._finish(seq, "stop" if seq.error is None else "error")
                continue
            if seq.num_uncomputed:
                continue  # a prefill chunk: no logits needed yet
            if not seq.prompt_cached:
                self.scheduler.cache_prefix(seq)
                seq.prompt_cached = True
            if seq.num_draft:
                verify.append((seq, lg[-(seq.num_draft + 1):]))
            elif seq.request.driver is not None:
                drv = seq.request.driver
                entry = driven.setdefault(id(drv), (drv, [], []))
                entry[1].append(seq)
                entry[2].append(lg[-1:])
            else:
                last = lg[-1:] if r.all_logits else lg  # (1, V) either way; a slice costs ~3 us
                rows.append(seq)
                row_logits.append(last)
                if seq.pending_fork:
                    for cid in self.fork(seq.seq_id, seq.pending_fork):
                        rows.append(self.seqs[cid])
                        row_logits.append(last)
                    seq.pending_fork = 0
        self._threads = torch.get_num_threads()  # what a logits hook runs on (see below)
        if rows and self._sample_greedy(rows, row_logits):
            rows = []  # done without a torch operator on one row: no thread-count switch
        if rows or verify or driven:
            with torch_inline():  # small per-row work: no OpenMP workers left spinning
                if rows:
                    self._sample(rows, stack_rows(row_logits))
                if verify:
                    self.speculator.verify(self, verify)  # type: ignore[union-attr]
                for drv, seqs, lgs in driven.values():
                    drv.on_logits(self, seqs, torch.cat(lgs))
        return touched

    def count_compute(self, req: Request, start: int, n: int) -> None:
        """Count ``n`` tokens computed after ``start`` attended cached tokens (their positions,
        unless a KV window dropped some) for ``req`` and in the totals."""
        ctx = n * start + n * (n + 1) // 2  # sum of context lengths of the n new tokens
        flops = self._flops_per_token * n + self._flops_per_context * ctx
        self.counters.computed_tokens += n
        self.counters.flops += flops
        req.computed_tokens += n
        req.flops += flops

    def _sample_greedy(self, rows: list[Seq], row_logits: list[torch.Tensor]) -> bool:
        """Emit the step of ``rows`` and return True when they are all plain greedy rows
        (``Seq.greedy``, decided when each was made) and one native argmax pass over their
        logits (``(1, V)`` each) is the step (:func:`~metagen.decoding.sampler.greedy_step`:
        decode_step's tokens and logprobs bit for bit); else False, having emitted nothing. One
        row runs no torch operator (the kernel's thread count is explicit), so it needs no
        ``torch_inline``; several are stacked inside one, as :meth:`_sample`'s are."""
        if self._sample_rows is None or self.logits_hook is not None:
            return False
        plans = [s.greedy for s in rows]
        if None in plans:
            return False
        if len(row_logits) == 1:
            logits = row_logits[0]
        else:
            with torch_inline():  # stack_rows may copy (torch.cat)
                logits = stack_rows(row_logits)
        got = greedy_step(logits, [s.state for s in rows], plans,
                          self._sample_rows.on(self._threads))
        if got is None:
            return False
        for seq, tok, lp in zip(rows, got[0], got[1]):
            self.emit(seq, tok, lp, None)
        return True

    def row_kernels(self) -> SampleRows | None:
        """The native passes over each row's vocabulary (``sample_rows.c``: sampling's draw, a
        beam step's candidates) on the current step's thread count; None off the CPU or where
        the native library cannot be built."""
        return None if self._sample_rows is None else self._sample_rows.on(self._threads)

    def _sample(self, rows: list[Seq], logits: torch.Tensor) -> None:
        states: list[SequenceState] = []
        for s in rows:
            states.append(s.state)
        if self.logits_hook is not None:
            logits = self.apply_logits_hook(logits, states, rows)
        kernels = None if self._sample_rows is None else self._sample_rows.on(self._threads)
        out = decode_step(logits, states, kernels)  # logits (B, V)
        tokens = out.token_list()
        lps = out.logprob_list()
        for i, seq in enumerate(rows):
            if i in out.errors or seq.error is not None:  # a NaN row, or its hook call raised
                seq.error = seq.error or out.errors[i]
                self._finish(seq, "error")
                continue
            self.emit(seq, tokens[i], lps[i], out.top_logprobs[i])

    def apply_logits_hook(self, logits: torch.Tensor, states: Sequence[SequenceState],
                          seqs: Sequence[Seq]) -> torch.Tensor:
        """``logits_hook(logits, states)`` (or ``logits`` without one); ``seqs[i]`` is the
        sequence row ``i`` belongs to. The hook gets a copy of ``logits`` (it may write it in
        place) and runs on the thread count the step was called with: a hook may run models of
        its own (the lockstep generator's auxiliary engines), which the per-row work's one
        thread would slow down.

        Failure is per request. When the call for the whole batch raises an ``Exception``, the
        hook is called again for each request's rows alone (in batch order). A request whose own
        call raises fails: each of its sequences gets that exception as ``error`` and its rows
        are NaN in the result, so the step finishes them with ``finish_reason="error"`` as it
        does any non-finite row. Every other request takes its own call's rows -- what the batch
        call gives them, the hook being row-wise -- and runs on as it would without the failed
        one. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``) propagates:
        the step fails (see :meth:`step`)."""
        if self.logits_hook is None:
            return logits
        with torch_threads(self._threads):
            try:
                return self.logits_hook(logits.clone(), states)
            except Exception:  # noqa: BLE001 -- isolated below: only its requests fail
                return self._hook_per_request(logits, states, seqs)

    def _hook_per_request(self, logits: torch.Tensor, states: Sequence[SequenceState],
                          seqs: Sequence[Seq]) -> torch.Tensor:
        """The hook's rows, called once per request (see :meth:`apply_logits_hook`)."""
        assert self.logits_hook is not None
        groups: dict[int, list[int]] = {}
        for i, seq in enumerate(seqs):
            groups.setdefault(id(seq.request), []).append(i)
        out = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for rows in groups.values():
            index = torch.tensor(rows, device=logits.device)
            try:
                part = self.logits_hook(logits.index_select(0, index), [states[i] for i in rows])
            except Exception as exc:  # noqa: BLE001 -- this request's failure, not the step's
                for i in rows:
                    seqs[i].error = exc
                part = torch.full((len(rows), logits.shape[1]), float("nan"),
                                  device=logits.device)
            out.index_copy_(0, index, part.to(out.dtype))
        return out

    def emit(self, seq: Seq, tok: int, logprob: float, top: dict[int, float] | None) -> None:
        """Emit one sampled (or verified) token: output, logprobs, then the stop rules
        (:func:`~metagen.engine.postprocess.stop_rule`)."""
        seq.state.append(tok)
        seq.token_ids.append(tok)
        seq.logprobs.append(logprob)
        seq.top_logprobs.append(top)
        self.counters.generated_tokens += 1
        seq.request.generated_tokens += 1
        out = seq.state.output_ids
        text_stop = seq.detok.update(out, check_stop=len(out) > seq.state.params.min_tokens)
        stop = stop_rule(seq, tok, text_stop, self.eos_token_ids, self.max_model_len)
        if stop is not None:
            self._finish(seq, *stop)

    def _finish(self, seq: Seq, reason: str, stop_reason: str | int | None = None) -> None:
        finish_sequence(seq, reason, stop_reason, self.scheduler, self.speculator)

    def check_integrity(self) -> None:
        """Block refcounts equal the references held by live sequences plus the cache; no
        sequence dropped (KV window) a block its next token attends to."""
        self.blocks.check_integrity()
        if self.radix is not None:
            self.radix.check_integrity()
        cfg = self.config
        expected = [0] * self.blocks.num_blocks
        for seq in self.scheduler.running + list(self.scheduler.waiting):
            for b in seq.block_table:
                expected[b] += 1
            assert seq.dropped_blocks <= released_blocks(
                seq.num_computed_tokens + 1, cfg.block_size, cfg.kv_sink_tokens,
                cfg.kv_window_tokens), \
                f"sequence {seq.seq_id} dropped blocks its next token attends to"
        if self.radix is not None:
            for b in self.radix.cached_blocks():
                expected[b] += 1
        actual = [self.blocks.refcount(b) for b in range(self.blocks.num_blocks)]
        assert expected == actual, "block refcounts differ from the references held"

