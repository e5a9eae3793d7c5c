"""Speculative decoding on the engine's paged KV cache, and the sequence-level KV session it uses.

:class:`PagedSession` is a thin, single-threaded layer over the engine core (``BlockManager``,
``KVCache``, ``RadixCache``, ``ModelRunner``) that token-level drivers need: start a sequence
from the prefix cache, ``extend`` many sequences in one forward, ``fork`` (share every block),
``truncate`` (roll back KV) and ``release`` (insert full blocks into the prefix cache).

:func:`speculative_generate` is lossless speculative decoding (Leviathan et al. 2023; Chen et al.
2023): each round a proposer drafts up to ``K`` tokens per row, the target verifies all rows'
drafts in ONE extend forward, and :func:`metagen.decoding.speculative.speculative_accept` decides.
Greedy output is identical to plain greedy decoding; sampled output is distributed exactly as the
target's (processed) sampling distribution. Randomness is counter-based per (seed, sample, step),
so a row's output does not depend on what it is batched with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from metagen.decoding import SequenceState, probs_for_sampling, uniforms_for
from metagen.decoding.speculative import speculative_accept
from metagen.engine.block_manager import BlockManager
from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.llama import LlamaModel
from metagen.engine.radix_cache import RadixCache, RadixNode
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

if TYPE_CHECKING:
    from metagen.engine.proposers import Proposer

ACCEPT_STREAM, RESAMPLE_STREAM = 11, 12  # rng streams (metagen.decoding.rng)


@dataclass(slots=True, eq=False)
class PagedSeq:
    """One sequence of a :class:`PagedSession`: ``tokens`` whose first ``num_cached`` have KV."""

    tokens: list[int]
    block_table: list[int] = field(default_factory=list)
    num_cached: int = 0
    locked: RadixNode | None = None
    cached_prompt_tokens: int = 0


class PagedSession:
    """Sequence-level KV operations for one model over a paged cache of ``num_blocks`` blocks.

    Contracts: ``extend`` computes KV for every not-yet-cached token of each sequence in one
    forward and returns float32 logits for the last token (1, V), or for every computed token
    when ``all_logits``; shared blocks are copied before being written. ``fork`` shares all
    blocks (refcounts). ``truncate(seq, n)`` keeps ``tokens[:n]``. ``release`` frees the blocks,
    after inserting the sequence's full blocks into the prefix cache when it is enabled.
    Counters ``prompt_tokens``, ``cached_tokens``, ``computed_tokens``, ``forwards`` account work.
    """

    def __init__(self, model: LlamaModel, num_blocks: int, block_size: int = 16,
                 prefix_cache: bool = True, hydragen: bool = True) -> None:
        cfg = model.cfg
        self.model = model
        self.blocks = BlockManager(num_blocks, block_size)
        self.kv = KVCache(cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim,
                          model.dtype, model.device)
        self.radix = RadixCache(self.blocks) if prefix_cache else None
        self.runner = ModelRunner(model, self.kv, hydragen=hydragen)
        self.block_size = block_size
        self.computed_tokens = 0
        self.cached_tokens = 0
        self.forwards = 0

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    def start(self, prompt_ids: Sequence[int]) -> PagedSeq:
        """A new sequence for ``prompt_ids``, reusing the longest cached prefix (at least one
        token is left to compute, so the next ``extend`` yields logits)."""
        if not prompt_ids:
            raise InvalidParameterError("prompt_ids", list(prompt_ids), "must not be empty")
        seq = PagedSeq(list(prompt_ids))
        if self.radix is not None:
            m = self.radix.match(prompt_ids)
            if m.blocks:
                self.blocks.incref(m.blocks)
                self.radix.lock(m.node)
                seq.locked, seq.block_table = m.node, list(m.blocks)
                seq.num_cached = min(m.num_tokens, len(prompt_ids) - 1)
                seq.cached_prompt_tokens = seq.num_cached
                self.cached_tokens += seq.num_cached
        return seq

    def _allocate(self, n: int) -> list[int]:
        if not self.blocks.can_allocate(n) and self.radix is not None:
            self.radix.evict(n - self.blocks.num_free)
        return self.blocks.allocate(n)

    def _prepare(self, seq: PagedSeq) -> None:
        need = -(-len(seq.tokens) // self.block_size)
        if need > len(seq.block_table):
            seq.block_table.extend(self._allocate(need - len(seq.block_table)))
        for i in range(seq.num_cached // self.block_size, need):  # blocks about to be written
            new, copied = self.blocks.copy_on_write(seq.block_table[i])
            if copied:
                self.kv.copy_blocks([seq.block_table[i]], [new])
                seq.block_table[i] = new

    def extend(self, seqs: Sequence[PagedSeq], all_logits: bool = False) -> list[torch.Tensor]:
        """One forward over every uncached token of ``seqs``; see the class contract."""
        reqs = []
        for seq in seqs:
            if seq.num_cached >= len(seq.tokens):
                raise InvalidParameterError("seqs", seq.num_cached, "a sequence has no new token")
            self._prepare(seq)
            reqs.append(ExtendRequest(seq.block_table, seq.num_cached,
                                      seq.tokens[seq.num_cached:], all_logits))
        out = self.runner.extend(reqs)
        for seq in seqs:
            self.computed_tokens += len(seq.tokens) - seq.num_cached
            seq.num_cached = len(seq.tokens)
        self.forwards += 1
        return out

    def fork(self, seq: PagedSeq, n: int) -> list[PagedSeq]:
        """``n`` new sequences sharing every block of ``seq`` (which stays valid)."""
        out = []
        for _ in range(n):
            self.blocks.incref(seq.block_table)
            if seq.locked is not None:
                self.radix.lock(seq.locked)  # type: ignore[union-attr]
            out.append(PagedSeq(list(seq.tokens), list(seq.block_table), seq.num_cached,
                                seq.locked, seq.cached_prompt_tokens))
        return out

    def truncate(self, seq: PagedSeq, n: int) -> None:
        """Keep ``tokens[:n]`` and their KV; free the blocks past them."""
        if not 0 < n <= len(seq.tokens):
            raise InvalidParameterError("n", n, f"must be in [1, {len(seq.tokens)}]")
        del seq.tokens[n:]
        seq.num_cached = min(seq.num_cached, n)
        keep = -(-n // self.block_size)
        if len(seq.block_table) > keep:
            self.blocks.free(seq.block_table[keep:])
            del seq.block_table[keep:]

    def release(self, seq: PagedSeq) -> None:
        """Give back ``seq``'s blocks (full computed blocks stay in the prefix cache)."""
        if self.radix is not None:
            full = seq.num_cached // self.block_size
            if full:
                self.radix.insert(seq.tokens, seq.block_table[:full])
            if seq.locked is not None:
                self.radix.unlock(seq.locked)
        self.blocks.free(seq.block_table)
        seq.block_table, seq.locked, seq.num_cached = [], None, 0


@dataclass(slots=True)
class SpecStats:
    """Work of a speculative run: verification rounds, drafts proposed and accepted."""

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def speculative_generate(target: PagedSession, proposer: Proposer,
                         prompts: Sequence[Sequence[int]], params: SamplingParams,
                         num_speculative_tokens: int = 4, eos_token_ids: Sequence[int] = (),
                         stats: SpecStats | None = None) -> list[list[int]]:
    """Generate for every prompt with speculative decoding; returns the output token ids.

    ``params`` gives the target's sampling distribution (temperature, truncation, penalties,
    ``max_tokens``, ``seed``, ``stop_token_ids``; mirostat is refused: its state is sequential).
    Output ends at ``max_tokens`` or after an EOS / stop token (which is included). Row ``i``
    samples as ``sample_index`` i. Stop strings and ``n > 1`` are refused (InvalidParameterError).
    """
    if params.mirostat_tau is not None:
        raise InvalidParameterError("mirostat_tau", params.mirostat_tau,
                                    "mirostat is not supported with speculative decoding")
    if params.stop:
        raise InvalidParameterError("stop", params.stop, "stop strings need text; speculative "
                                    "decoding works on token ids: use stop_token_ids")
    if params.n != 1:
        raise InvalidParameterError("n", params.n, "one sample per prompt: repeat the prompt "
                                    "(row i samples as sample_index i)")
    if not isinstance(num_speculative_tokens, int) or not 0 <= num_speculative_tokens <= 64:
        raise InvalidParameterError("num_speculative_tokens", num_speculative_tokens,
                                    "must be an integer in [0, 64]")
    stats = stats if stats is not None else SpecStats()
    ends = set(eos_token_ids) | set(params.stop_token_ids)
    states = [SequenceState(params, list(p), sample_index=i, eos_token_ids=tuple(eos_token_ids))
              for i, p in enumerate(prompts)]
    seqs = [target.start(p) for p in prompts]
    live = list(range(len(prompts)))
    while live:
        k = min(num_speculative_tokens, min(params.max_tokens - states[i].step for i in live) - 1)
        k = max(k, 0)
        prop = proposer.propose([seqs[i].tokens for i in live], k,
                                [states[i] for i in live])  # tokens (B, K)
        verify = []
        for j, i in enumerate(live):
            nd = int(prop.num_draft[j])
            seqs[i].tokens.extend(prop.tokens[j, :nd].tolist())
            verify.append(seqs[i])
        logits = target.extend(verify, all_logits=True)
        # target distributions at each verified position: (B, K+1, V)
        vocab = target.vocab_size
        probs = torch.zeros(len(live), k + 1, vocab, dtype=torch.float64)
        rows, where = [], []
        for j, i in enumerate(live):
            nd = int(prop.num_draft[j])
            lg = logits[j][-(nd + 1):]  # (nd+1, V)
            out = states[i].output_ids
            drafts = prop.tokens[j, :nd].tolist()
            pos_states = [SequenceState(params, states[i].prompt_ids, out + drafts[:t],
                                        states[i].sample_index, states[i].eos_token_ids,
                                        rng_seed=states[i].rng_seed) for t in range(nd + 1)]
            rows.append((lg, pos_states))
            where.append(nd)
        flat = probs_for_sampling(torch.cat([r[0] for r in rows]), [s for r in rows for s in r[1]])
        off = 0
        for j, nd in enumerate(where):
            probs[j, :nd + 1] = flat[off:off + nd + 1].double()
            off += nd + 1
        steps = [states[i].step for i in live]
        seeds = [states[i].rng_seed for i in live]
        idx = [states[i].sample_index for i in live]
        acc_u = torch.from_numpy(np.stack(
            [uniforms_for(seeds, idx, [s + t for s in steps], ACCEPT_STREAM) for t in range(k)]
            + [np.zeros(len(live))], 1)[:, :k].copy())  # (B, K)
        res_u = torch.from_numpy(uniforms_for(seeds, idx, steps, RESAMPLE_STREAM))
        outcome = speculative_accept(prop.tokens[:, :k], prop.probs, probs, acc_u, res_u,
                                     num_draft=prop.num_draft)
        still = []
        for j, i in enumerate(live):
            nd, na = int(prop.num_draft[j]), int(outcome.num_accepted[j])
            target.truncate(seqs[i], len(seqs[i].tokens) - nd + na)
            stats.proposed += nd
            stats.accepted += na
            done = False
            for tok in outcome.tokens[j, :na + 1].tolist():
                states[i].append(tok)
                stats.emitted += 1
                if tok in ends or states[i].step >= params.max_tokens:
                    done = True
                    break
            seqs[i].tokens = seqs[i].tokens[:len(states[i].prompt_ids)] + states[i].output_ids
            if len(seqs[i].tokens) <= seqs[i].num_cached:  # ended inside the accepted drafts
                target.truncate(seqs[i], len(seqs[i].tokens))
            if done:
                target.release(seqs[i])
            else:
                still.append(i)
        stats.rounds += 1
        live = still
    proposer.release()
    return [list(s.output_ids) for s in states]
