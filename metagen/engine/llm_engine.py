"""LLMEngine: continuous-batching generation over the paged KV cache.

Loop of one :meth:`LLMEngine.step`: schedule (admit, chunk, preempt) -> prepare the batch ->
forward (``ModelRunner.extend``) -> process logits and sample (``metagen.decoding.decode_step``,
per-row parameters) -> append, check stops, finish, cache. Requests are added with
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
within that rounding of each other.

For algorithms on top (beam search, speculative decoding): :meth:`fork` (children share KV),
:meth:`truncate` (roll a sequence back), ``engine.runner`` (the raw extend forward, see
:mod:`metagen.engine.model_runner`), and ``logits_hook`` (a callable ``(logits (B, V),
states) -> logits`` on the raw logits before sampling, ``states`` the rows' SequenceStates; tests use it to inject NaN, RELIABILITY V22).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from metagen.decoding import SequenceState, decode_step
from metagen.engine.block_manager import BlockManager
from metagen.engine.config import DEFAULT_KV_CACHE_BYTES, EngineConfig
from metagen.engine.detokenizer import Detokenizer
from metagen.engine.engine_drivers import DriversMixin
from metagen.engine.engine_scoring import ScoringMixin
from metagen.engine.kv_cache import KVCache, bytes_per_block
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models import LlamaModel, ModelConfig, load_model
from metagen.engine.outputs import EngineStats, RequestOutput
from metagen.engine.radix_cache import RadixCache
from metagen.engine.scheduler import Scheduler
from metagen.engine.sequence import Request, Sequence as Seq, Status
from metagen.engine.validation import check_params, check_prompt_ids
from metagen.errors import InvalidParameterError
from metagen.generators.tokenize import bad_words_ids
from metagen.types import SamplingParams

DEFAULT_KV_BYTES = DEFAULT_KV_CACHE_BYTES
BATCH_RTOL = 1e-5  # see "Batch composition" in the module docstring
LogitsHook = Callable[[torch.Tensor, Sequence[SequenceState]], torch.Tensor]


class LLMEngine(ScoringMixin, DriversMixin):
    """The built-in engine. ``tokenizer`` (optional) enables text, stop strings and bad words."""

    def __init__(self, model: LlamaModel, tokenizer: Any = None,
                 config: EngineConfig | None = None) -> None:
        cfg = config or EngineConfig()
        mc = model.cfg
        self.model, self.tokenizer, self.config = model, tokenizer, cfg
        bs = cfg.block_size
        max_len = min(cfg.max_model_len or model.max_positions, model.max_positions,
                      mc.sliding_window or model.max_positions)
        per_block = bytes_per_block(mc.num_layers, bs, mc.num_kv_heads, mc.head_dim, model.dtype)
        if cfg.num_blocks is not None:
            num_blocks = cfg.num_blocks
        elif cfg.kv_cache_bytes is not None:
            num_blocks = cfg.kv_cache_bytes // per_block
        else:
            num_blocks = min(DEFAULT_KV_BYTES // per_block, -(-cfg.max_num_seqs * max_len // bs))
        if num_blocks < 2:
            raise InvalidParameterError("kv_cache_bytes", cfg.kv_cache_bytes,
                                        f"too small: one block needs {per_block} bytes")
        self.max_model_len = min(max_len, num_blocks * bs)
        self.kv = KVCache(mc.num_layers, num_blocks, bs, mc.num_kv_heads, mc.head_dim,
                          model.dtype, model.device)
        self.blocks = BlockManager(num_blocks, bs)
        self.radix = RadixCache(self.blocks) if cfg.prefix_cache else None
        self.scheduler = Scheduler(cfg, self.blocks, self.radix, self.kv.copy_blocks)
        self.runner = ModelRunner(model, self.kv, hydragen=cfg.hydragen,
                                  hydragen_min_prefix=cfg.hydragen_min_prefix)
        eos = set(mc.eos_token_ids)
        if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        self.eos_token_ids = tuple(sorted(eos))
        self.requests: dict[str, Request] = {}
        self.seqs: dict[int, Seq] = {}
        self.stats = EngineStats()
        self.logits_hook: LogitsHook | None = None
        self._ids = itertools.count()
        self._req_ids = itertools.count()

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None,
                        tokenizer: Any = None, **options: Any) -> LLMEngine:
        """Load a Hugging Face folder; ``options`` are :class:`EngineConfig` fields. The RoPE
        tables cover only the positions this engine can run (:meth:`EngineConfig.max_positions`)."""
        cfg = config or EngineConfig(**options)
        positions = cfg.max_positions(ModelConfig.from_folder(path))
        model = load_model(path, cfg.torch_dtype(), cfg.torch_device(), positions)
        if tokenizer is None and any((Path(path) / f).exists()
                                     for f in ("tokenizer.json", "tokenizer_config.json")):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path))
        return cls(model, tokenizer, cfg)

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    # -- requests -------------------------------------------------------------------------------

    def validate(self, prompt_ids: Any, params: Any) -> tuple[list[int], SamplingParams]:
        """Raise InvalidPromptError / InvalidParameterError for a request the engine cannot serve."""
        ids = check_prompt_ids(prompt_ids, self.vocab_size, self.max_model_len)
        return ids, check_params(params, len(ids), self.vocab_size, self.max_model_len,
                                 self.tokenizer is not None)

    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        """Queue a request (``n`` samples of ``params``); returns its id. Validates first."""
        ids, params = self.validate(prompt_ids, params or SamplingParams())
        rid = request_id if request_id is not None else f"req-{next(self._req_ids)}"
        if rid in self.requests:
            raise InvalidParameterError("request_id", rid, "is already in use")
        req = Request(rid, ids, params)
        bad = bad_words_ids(self.tokenizer, params.bad_words) if params.bad_words else ()
        state = SequenceState(params, list(ids), eos_token_ids=self.eos_token_ids,
                              bad_words_ids=bad)
        seq = self._new_seq(req, state, list(ids), Detokenizer(self.tokenizer, ids, params.stop))
        seq.pending_fork = params.n - 1
        self.requests[rid] = req
        self.stats.prompt_tokens += len(ids)
        self.stats.requests += 1
        self.scheduler.add(seq)
        return rid

    def _new_seq(self, req: Request, state: SequenceState, tokens: list[int],
                 detok: Detokenizer) -> Seq:
        seq = Seq(next(self._ids), req, state, tokens, detok)
        req.seqs.append(seq)
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
            child = self._new_seq(parent.request, parent.state.fork(len(parent.request.seqs)),
                                  list(parent.token_ids), parent.detok.copy())
            child.logprobs, child.top_logprobs = list(parent.logprobs), list(parent.top_logprobs)
            child.prompt_cached = parent.prompt_cached
            if parent.status is Status.RUNNING:
                child.block_table = list(parent.block_table)
                child.num_computed_tokens = parent.num_computed_tokens
                self.blocks.incref(child.block_table)
                self.scheduler.add_running(child, after=after)
            else:
                self.scheduler.add(child)
            after = child
            out.append(child.seq_id)
        return out

    def truncate(self, seq_id: int, num_tokens: int) -> None:
        """Roll sequence ``seq_id`` back to its first ``num_tokens`` tokens (prompt included):
        drops later output tokens, their logprobs and any KV past them (mirostat state is not
        rolled back). Used by speculative decoding to discard rejected draft tokens."""
        seq = self.seqs[seq_id]
        if seq.is_finished or not seq.num_prompt_tokens <= num_tokens <= len(seq.token_ids):
            raise InvalidParameterError("num_tokens", num_tokens, "must be within a live "
                                        "sequence's output (prompt length .. current length)")
        keep_out = num_tokens - seq.num_prompt_tokens
        del seq.token_ids[num_tokens:], seq.state.output_ids[keep_out:]
        del seq.logprobs[keep_out:], seq.top_logprobs[keep_out:]
        # the last kept token is recomputed: its logits give the next token
        seq.num_computed_tokens = min(seq.num_computed_tokens, num_tokens - 1)
        keep_blocks = -(-seq.num_computed_tokens // self.config.block_size)
        if len(seq.block_table) > keep_blocks:
            self.blocks.free(seq.block_table[keep_blocks:])
            del seq.block_table[keep_blocks:]
        seq.detok.searched = 0
        seq.detok.update(seq.state.output_ids, check_stop=False)

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

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # -- the loop -------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One scheduling + forward + sampling step; returns the requests finished by it.

        If the step raises (a raising ``logits_hook``, a ``KeyboardInterrupt`` in the forward),
        every request with a sequence in its batch is aborted -- its blocks freed, none of them
        put in the prefix cache -- and the exception propagates: the engine is consistent
        (``check_integrity`` holds) and serves the other requests at the next step."""
        batch = self.scheduler.schedule()
        self.stats.preemptions = self.scheduler.num_preemptions
        if not batch:
            return []
        self.stats.steps += 1
        try:
            return self._run_batch(batch)
        except BaseException as exc:
            for req in {id(s.request): s.request for s, _ in batch}.values():
                for seq in req.seqs:
                    if not seq.is_finished:
                        seq.error = exc  # never cache blocks whose KV this step may have torn
                self.abort(req.request_id)
            raise

    def _run_batch(self, batch: list[tuple[Seq, int]]) -> list[RequestOutput]:
        """Forward, sample and finish the scheduled ``(sequence, new tokens)`` pairs."""
        reqs = [ExtendRequest(s.block_table, s.num_computed_tokens,
                              s.token_ids[s.num_computed_tokens:s.num_computed_tokens + n],
                              all_logits=s.score_from is not None) for s, n in batch]
        logits = self.runner.extend(reqs)
        rows: list[Seq] = []
        row_logits: list[torch.Tensor] = []
        touched: list[Request] = []
        for (seq, n), lg in zip(batch, logits):
            start = seq.num_computed_tokens
            seq.num_computed_tokens += n
            self._count_compute(seq.request, start, n)
            if seq.score_from is not None:
                self._collect_scores(seq, start, lg)
            elif seq.num_uncomputed == 0:
                if not seq.prompt_cached:
                    self.scheduler.cache_prefix(seq)
                    seq.prompt_cached = True
                rows.append(seq)
                row_logits.append(lg[-1:])
                if seq.pending_fork:
                    for cid in self.fork(seq.seq_id, seq.pending_fork):
                        rows.append(self.seqs[cid])
                        row_logits.append(lg[-1:])
                    seq.pending_fork = 0
            touched.append(seq.request)
        if rows:
            self._sample(rows, torch.cat(row_logits))
        return self._collect_finished(touched)

    def _count_compute(self, req: Request, start: int, n: int) -> None:
        """Count ``n`` tokens computed at positions ``start ..`` for ``req`` and in the totals."""
        mc = self.model.cfg
        ctx = n * start + n * (n + 1) // 2  # sum of context lengths of the n new tokens
        flops = 2.0 * mc.num_params * n + 4.0 * mc.num_layers * mc.num_heads * mc.head_dim * ctx
        self.stats.computed_tokens += n
        self.stats.flops += flops
        req.computed_tokens += n
        req.flops += flops

    def _sample(self, rows: list[Seq], logits: torch.Tensor) -> None:
        states = [s.state for s in rows]
        if self.logits_hook is not None:
            logits = self.logits_hook(logits, states)
        out = decode_step(logits, states)  # logits (B, V)
        tokens = out.tokens.tolist()
        lps = out.logprobs.tolist()
        for i, seq in enumerate(rows):
            if i in out.errors:
                seq.error = out.errors[i]
                self._finish(seq, "error")
                continue
            self._append(seq, tokens[i], lps[i], out.top_logprobs[i])

    def _append(self, seq: Seq, tok: int, logprob: float, top: dict[int, float] | None) -> None:
        p = seq.state.params
        seq.state.append(tok)
        seq.token_ids.append(tok)
        seq.logprobs.append(logprob)
        seq.top_logprobs.append(top)
        self.stats.generated_tokens += 1
        seq.request.generated_tokens += 1
        n_out = len(seq.state.output_ids)
        stop = seq.detok.update(seq.state.output_ids, check_stop=n_out > p.min_tokens)
        if tok in p.stop_token_ids:
            self._finish(seq, "stop", tok)
        elif tok in self.eos_token_ids and not p.ignore_eos:
            self._finish(seq, "stop")
        elif stop is not None:
            self._finish(seq, "stop", stop)
        elif n_out >= p.max_tokens or len(seq.token_ids) >= self.max_model_len:
            self._finish(seq, "length")

    def _finish(self, seq: Seq, reason: str, stop_reason: str | int | None = None) -> None:
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        self.scheduler.finish(seq)

    def _collect_finished(self, touched: list[Request]) -> list[RequestOutput]:
        done, seen = [], set()
        for req in touched:
            if id(req) in seen or not req.finished or req.request_id not in self.requests:
                continue
            seen.add(id(req))
            del self.requests[req.request_id]
            for seq in req.seqs:
                self.seqs.pop(seq.seq_id, None)
            self.stats.cached_prompt_tokens += req.num_cached_tokens
            done.append(self._output(req))
        return done

    def _output(self, req: Request) -> RequestOutput:
        scores = None
        if req.seqs[0].score_from is not None:
            scores = [float(sum(s.score_logprobs)) for s in req.seqs]
        return RequestOutput(req.request_id, req.prompt_ids, [s.completion() for s in req.seqs],
                             [s.error for s in req.seqs], req.num_cached_tokens, scores,
                             req.computed_tokens, req.generated_tokens, req.flops)

    def check_integrity(self) -> None:
        """Block refcounts equal the references held by live sequences plus the cache."""
        self.blocks.check_integrity()
        if self.radix is not None:
            self.radix.check_integrity()
        expected = [0] * self.blocks.num_blocks
        for seq in self.scheduler.running + list(self.scheduler.waiting):
            for b in seq.block_table:
                expected[b] += 1
        if self.radix is not None:
            for b in self.radix.cached_blocks():
                expected[b] += 1
        actual = [self.blocks.refcount(b) for b in range(self.blocks.num_blocks)]
        assert expected == actual, "block refcounts differ from the references held"
