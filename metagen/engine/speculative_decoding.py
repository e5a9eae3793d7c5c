"""Engine-wide speculative decoding (as in vLLM): a :class:`Speculator` inside ``LLMEngine.step``.

Lossless speculative decoding (Leviathan et al. 2023; Chen et al. 2023) on the engine's one core.
Each step, before scheduling, :meth:`Speculator.propose` asks the proposer (prompt lookup, or a
draft model on its own small engine) for up to ``K`` draft tokens for every running decoding row
and appends them to the row as uncomputed tokens (``Sequence.num_draft``); the scheduler then
schedules ``1 + drafts`` tokens for the row like any other tokens, the runner returns the logits
of all of them, and :meth:`Speculator.verify` applies
:func:`metagen.decoding.speculative.speculative_accept` to the target's processed distributions
(the row's own parameters at each draft position). The accepted drafts and the corrected (or
bonus) token are emitted one by one through the engine's ordinary append path (stop tokens, stop
strings, ``max_tokens``, logprobs, statistics); the rejected drafts are dropped and the blocks past
the kept tokens freed. The KV of accepted drafts is kept.

Greedy output is identical to plain greedy decoding; sampled output is distributed exactly as the
target's (processed) sampling distribution, with counter-based uniforms per (seed, sample,
step) on their own streams, so a row does not depend on its batch (its seeded tokens differ from
those of plain sampling, which draws on another stream).

Rows that decode normally: requests with mirostat (its state is sequential), beam-search and
scoring requests, prefill chunks, and a request's first step before its ``n`` samples are forked
(they speculate from their next step on). Drafts that the step's token budget cannot hold are
dropped before the forward (:meth:`Speculator.fit`).

Draft trees (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024): where the proposal names
candidates beside the drafts (``Proposal.alternatives``, ``EngineConfig.speculative_tree``), they
are appended after the chain as leaves (``Sequence.draft_leaves``; layout in
:mod:`metagen.engine.draft_tree`) and verified in the same step, each attending its ancestors
alone (``ExtendRequest.leaf_gaps``). :func:`~metagen.decoding.tree_speculative.tree_accept`
(recursive rejection sampling over each depth's candidates; greedy: the candidate that is the
argmax) walks the tree: still exactly the target's distribution, and greedy output still plain
greedy's. An accepted leaf's K/V is moved to its position (``KVCache.move_entry``); the other
leaves' are dropped with the rejected drafts. Acceptance per depth counts a depth as accepted
where any of its candidates was.

With ``adaptive``, each row drafts the ``k`` (at most ``num_speculative_tokens``) that maximises
its expected tokens per cost, from its own running acceptance rate and the costs of a draft step
and of a verified token (:mod:`metagen.engine.adaptive_k`), none where no round would pay for
itself (then one every ``adaptive_k.probe_interval`` steps, to re-measure); otherwise every row
drafts ``num_speculative_tokens``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from metagen.decoding import (
    SequenceState, greedy_tokens, log_softmax_rows, probs_for_sampling, uniforms_for,
)
from metagen.decoding.rng import uniform_for
from metagen.decoding.sampler import greedy_step, top_logprobs_rows
from metagen.decoding.speculative import speculative_accept
from metagen.decoding.tree_speculative import TreeOutcome, tree_accept, tree_accept_greedy
from metagen.engine.adaptive_k import (
    VERIFY_COST, AcceptanceTracker, best_k, draft_step_cost, probe_interval, verify_step_cost,
)
from metagen.engine.draft_tree import leaf_move, node_paths
from metagen.engine.proposers import NgramProposer, Proposer
from metagen.errors import InvalidParameterError, ModelLoadError, NumericalError

if TYPE_CHECKING:
    from metagen.engine.config import EngineConfig
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.models.interface import CausalLM
    from metagen.engine.sequence import Sequence as Seq

ACCEPT_STREAM, RESAMPLE_STREAM = 11, 12  # rng streams (metagen.decoding.rng)
LEAF_STREAM = 40  # + j: the accept test of a depth's j-th leaf (a draft tree)
MAX_SPECULATIVE_TOKENS = 64


@dataclass(slots=True)
class SpecStats:
    """Work of speculation: verification rounds, drafts proposed and accepted, tokens emitted;
    and per draft depth ``d`` (0: a round's first draft) how many drafts were tested there
    (``tested[d]``: every earlier draft of their round accepted) and how many of those were
    accepted (``accepted_at[d]``); with draft trees, ``leaves_accepted`` counts the rounds whose
    path ended on a leaf (a candidate beside the draft)."""

    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    leaves_accepted: int = 0
    tested: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def acceptance_by_depth(self) -> list[float]:
        """Per depth ``d``, the fraction of drafts tested there that were accepted: the chance a
        round goes on past depth ``d`` once it reached it."""
        return [a / t for a, t in zip(self.accepted_at, self.tested)]

    def add_round(self, proposed: int, accepted: int, tested: int | None = None) -> None:
        """Count one row's round: ``proposed`` drafts, ``accepted`` of them accepted (a chain's
        first ones; a tree's path, one per depth) and the depths ``tested`` (default a chain's:
        the accepted ones and the first miss)."""
        self.proposed += proposed
        self.accepted += accepted
        depth = min(accepted + 1, proposed) if tested is None else tested
        for lst in (self.tested, self.accepted_at):
            lst.extend([0] * (depth - len(lst)))
        for d in range(depth):
            self.tested[d] += 1
            self.accepted_at[d] += int(d < accepted)


class Speculator:
    """Drafts, fits and verifies the speculative rows of one engine (module docstring).

    ``adaptive``: choose each row's ``k`` (module docstring), a draft step costing
    ``draft_cost`` target decode steps (0: prompt lookup) and one more verified token
    ``verify_cost`` (``adaptive_k.verify_step_cost``)."""

    def __init__(self, proposer: Proposer, num_speculative_tokens: int = 4,
                 adaptive: bool = False, draft_cost: float = 0.0,
                 verify_cost: float = VERIFY_COST) -> None:
        k = num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise InvalidParameterError("num_speculative_tokens", k,
                                        f"must be an integer in [1, {MAX_SPECULATIVE_TOKENS}]")
        if not isinstance(adaptive, bool):
            raise InvalidParameterError("adaptive", adaptive, "must be a bool")
        self.probe_every = probe_interval(draft_cost, verify_cost, k)  # checks both costs
        self.proposer, self.k = proposer, k
        self.adaptive, self.draft_cost = adaptive, float(draft_cost)
        self.verify_cost = float(verify_cost)
        self.stats = SpecStats()
        self._drafted: list[Seq] = []
        self._trackers: dict[int, AcceptanceTracker] = {}  # seq_id -> its acceptance (adaptive)

    def row_k(self, seq: Seq) -> int:
        """The drafts ``seq`` asks for this round: ``k``, or with ``adaptive`` the best ``k``
        for its running acceptance rate, 0 included (then 1 at every ``probe_every``-th such
        step: ``adaptive_k.probe_interval`` of the costs; never where no round could pay). A
        function of the row's own rounds only."""
        if not self.adaptive:
            return self.k
        tracker = self._trackers.setdefault(seq.seq_id, AcceptanceTracker())
        k = best_k(tracker.rate, self.k, self.draft_cost, self.verify_cost, k_min=0)
        if k == 0:
            tracker.skipped += 1
            if self.probe_every is None or tracker.skipped < self.probe_every:
                return 0
            k = 1  # a probe
        tracker.skipped = 0
        return k

    @staticmethod
    def serves(seq: Seq) -> bool:
        """Whether ``seq`` speculates in the coming step (a running decoding row of a plain
        sampling request without mirostat)."""
        return (seq.num_uncomputed == 1 and seq.num_computed_tokens > 0 and seq.num_draft == 0
                and seq.score_from is None and seq.request.driver is None
                and not seq.pending_fork and seq.state.params.mirostat_tau is None)

    def propose(self, engine: LLMEngine) -> None:
        rows, ks = [], []
        for seq in engine.scheduler.running:
            if self.serves(seq):
                p = seq.state.params
                k = min(self.row_k(seq), p.max_tokens - len(seq.state.output_ids) - 1,
                        engine.max_model_len - len(seq.token_ids) - 1)
                if k > 0:
                    rows.append(seq)
                    ks.append(k)
        if not rows:
            return
        prop = self.proposer.propose([s.seq_id for s in rows], [list(s.token_ids) for s in rows],
                                     [s.state for s in rows], ks)
        nums = prop.num_draft.tolist()
        for j, seq in enumerate(rows):
            nd = min(int(nums[j]), ks[j])
            if nd > 0:
                leaves = [] if prop.alternatives is None else [
                    (d, t) for d, alts in enumerate(prop.alternatives[j][:nd]) for t in alts]
                room = engine.max_model_len - len(seq.token_ids) - 1 - nd  # leaves' slots
                leaves = leaves[:max(room, 0)]
                seq.token_ids.extend(prop.tokens[j, :nd].tolist() + [t for _, t in leaves])
                seq.num_draft = nd + len(leaves)
                seq.draft_leaves = [d for d, _ in leaves]
                seq.draft_probs = None if prop.probs is None else prop.probs[j, :nd]
                self._drafted.append(seq)

    def fit(self, batch: Sequence[tuple[Seq, int]]) -> None:
        """Keep each drafted row's drafts only up to the tokens scheduled for it this step."""
        scheduled = {id(s): n for s, n in batch}
        for seq in self._drafted:
            n = scheduled.get(id(seq))
            base = len(seq.token_ids) - seq.num_draft
            end = 0 if n is None else seq.num_computed_tokens + n
            keep = min(max(end - base, 0), seq.num_draft)
            if keep < seq.num_draft:  # a tree's leaves go first: they follow the chain
                chain = seq.num_draft - len(seq.draft_leaves)
                del seq.token_ids[base + keep:]
                seq.num_draft = keep
                seq.draft_leaves = seq.draft_leaves[:max(keep - chain, 0)]
                seq.draft_probs = None if seq.draft_probs is None or keep == 0 else \
                    seq.draft_probs[:min(keep, chain)]
        self._drafted = []

    def forget(self, seq: Seq) -> None:
        self._trackers.pop(seq.seq_id, None)
        self.proposer.forget(seq.seq_id)

    def verify(self, engine: LLMEngine, rows: Sequence[tuple[Seq, torch.Tensor]]) -> None:
        """``rows``: each drafted sequence and its logits (num_draft + 1, V) at positions
        ``base - 1 .. base + num_draft - 1`` (``base`` = its length without drafts).

        A batch whose rows all decode greedily takes the direct form of the rule (greedy_accept
        on the processed argmax), which is what :func:`speculative_accept` gives for one-hot
        target distributions, without building them; any other batch goes through
        :func:`speculative_accept`."""
        states: list[SequenceState] = []
        for seq, _ in rows:
            st, base = seq.state, len(seq.token_ids) - seq.num_draft
            paths = node_paths(seq.token_ids[base:], seq.draft_leaves)
            states += [SequenceState(st.params, st.prompt_ids, st.output_ids + path,
                                     st.sample_index, st.eos_token_ids, st.bad_words_ids,
                                     rng_seed=st.rng_seed, constraint=st.constraint,
                                     heal=st.heal, bad_text=st.bad_text)
                       for path in paths]  # one matcher, synced row by row
        owners = [seq for seq, _ in rows for _ in range(seq.num_draft + 1)]
        flat = engine.apply_logits_hook(rows[0][1] if len(rows) == 1 else
                                        torch.cat([lg for _, lg in rows]), states,
                                        owners)  # (N, V); a failed hook call's rows are NaN
        greedy = all(seq.state.params.is_greedy for seq, _ in rows)
        if greedy and self._verify_argmax(engine, [seq for seq, _ in rows], flat, states):
            return
        raw_lp = log_softmax_rows(flat)
        if greedy:
            target, dead_t = greedy_tokens(flat, states)  # (N,) argmax and dead rows
        else:
            target = probs_for_sampling(flat, states)  # (N, V); NaN rows: nothing to sample
            dead_t = torch.isnan(target).any(dim=-1)
        dead = dead_t.tolist()
        good, offsets, off = [], [], 0
        for seq, lg in rows:
            n = seq.num_draft + 1
            if any(dead[off:off + n]):
                seq.error = seq.error or NumericalError(  # its hook call's error, if that
                    f"request {seq.request.request_id}: logits of a verified position are "
                    "NaN/inf or leave no token")
                engine.finish(seq.seq_id, "error")
            else:
                good.append(seq)
                offsets.append(off)
            off += n
        if not good:
            return
        emitted = (self._accept_greedy(good, offsets, target.tolist()) if greedy
                   else self._accept_sampled(good, offsets, target))
        logprobs = []
        for seq, off, out in zip(good, offsets, emitted):
            toks = out.tokens
            lp = raw_lp[torch.tensor([off + i for i in (0, *out.nodes)], device=raw_lp.device)]
            chosen = lp.gather(1, torch.tensor(toks, device=lp.device)[:, None])[:, 0].tolist()
            ks = [seq.state.params.logprobs] * len(toks)
            logprobs.append((chosen, top_logprobs_rows(lp, ks)))
        self._emit(engine, good, emitted, logprobs)

    def _verify_argmax(self, engine: LLMEngine, seqs: list[Seq], flat: torch.Tensor,
                       states: list[SequenceState]) -> bool:
        """The round of greedy rows that only end-token suppression can touch (each ``Seq.greedy``
        set), from one native argmax pass over the verified logits ``flat`` (N, V)
        (:func:`~metagen.decoding.sampler.greedy_step`: the processed argmax at every position
        and its raw logprob, as a decode step gives them), instead of a log-softmax and the
        processing pipeline over every row; False, having done nothing, where that pass is not
        the step (no native kernels, a logits hook, another processor, a bad row): the general
        rule then runs."""
        kernels = engine.row_kernels()
        if kernels is None or engine.logits_hook is not None:
            return False
        plans = [seq.greedy for seq in seqs for _ in range(seq.num_draft + 1)]
        got = greedy_step(flat, states, plans, kernels)
        if got is None:
            return False
        best, lps = got
        offsets = list(itertools.accumulate([seq.num_draft + 1 for seq in seqs], initial=0))[:-1]
        emitted = self._accept_greedy(seqs, offsets, best)
        none: list[dict[int, float] | None] = [None] * len(flat)  # no row lists its top-k
        self._emit(engine, seqs, emitted, [([lps[off + i] for i in (0, *out.nodes)], none)
                                           for off, out in zip(offsets, emitted)])
        return True

    @staticmethod
    def _accept_greedy(seqs: list[Seq], offsets: list[int], best: list[int]
                       ) -> list[TreeOutcome]:
        """Greedy rows (``best`` (N,): the processed argmax at every verified position): per
        row, :func:`~metagen.decoding.tree_speculative.tree_accept_greedy` on lists (a round is
        a few tokens): a chain's drafts while they equal the argmax, then the argmax where they
        stop (:func:`~metagen.decoding.speculative.greedy_accept`'s rule), a tree's walk."""
        return [tree_accept_greedy(*_tree_of(seq), best[off:off + seq.num_draft + 1])
                for seq, off in zip(seqs, offsets)]

    def _accept_sampled(self, seqs: list[Seq], offsets: list[int], probs: torch.Tensor
                        ) -> list[TreeOutcome]:
        """Any rows (``probs`` (N, V): the processed distributions at every verified position,
        one-hot for greedy rows): per row, the tokens :func:`speculative_accept` emits (a tree's
        row: :func:`~metagen.decoding.tree_speculative.tree_accept`'s)."""
        trees = [j for j, s in enumerate(seqs) if s.draft_leaves]
        if trees:
            chains = [j for j in range(len(seqs)) if j not in set(trees)]
            got = dict(zip(trees, (_accept_tree(seqs[j], offsets[j], probs) for j in trees)))
            if chains:
                got.update(zip(chains, self._accept_sampled([seqs[j] for j in chains],
                                                            [offsets[j] for j in chains], probs)))
            return [got[j] for j in range(len(seqs))]
        b, kmax, vocab = len(seqs), max(s.num_draft for s in seqs), probs.shape[1]
        drafts = torch.zeros(b, kmax, dtype=torch.long)  # (B, K)
        target = torch.zeros(b, kmax + 1, vocab, dtype=torch.float64)  # (B, K+1, V)
        q = None if seqs[0].draft_probs is None else torch.zeros(b, kmax, vocab)  # (B, K, V)
        for j, (seq, off) in enumerate(zip(seqs, offsets)):
            nd = seq.num_draft
            drafts[j, :nd] = torch.tensor(seq.token_ids[-nd:], dtype=torch.long)
            target[j, :nd + 1] = probs[off:off + nd + 1].double()
            if q is not None:
                q[j, :nd] = seq.draft_probs
        seeds = [int(s.state.rng_seed or 0) for s in seqs]  # set by SequenceState
        idx = [s.state.sample_index for s in seqs]
        steps = [s.state.step for s in seqs]
        acc_u = torch.from_numpy(np.stack([uniforms_for(seeds, idx, [s + t for s in steps],
                                                        ACCEPT_STREAM) for t in range(kmax)], 1))
        res_u = torch.from_numpy(uniforms_for(seeds, idx, steps, RESAMPLE_STREAM))
        num_draft = torch.tensor([s.num_draft for s in seqs], dtype=torch.long)
        out = speculative_accept(drafts, q, target, acc_u, res_u, num_draft=num_draft)
        return [TreeOutcome(out.tokens[j, :na + 1].tolist(), list(range(1, na + 1)))
                for j, na in enumerate(out.num_accepted.tolist())]

    def _emit(self, engine: LLMEngine, seqs: list[Seq], emitted: list[TreeOutcome],
              logprobs: list[tuple[list[float], list[dict[int, float] | None]]]) -> None:
        """Drop every row's drafts, then emit ``emitted[j].tokens`` (its accepted drafts and
        its corrected or bonus token) with ``logprobs[j]`` (each token's logprob and its top-k
        listing) through the engine's append path, claiming the accepted drafts' KV one by one
        (an accepted leaf's moved to its position first); free the blocks past what a row
        kept."""
        self.stats.rounds += 1
        for seq, out, (chosen, tops) in zip(seqs, emitted, logprobs):
            toks, na, nd, leaves = out.tokens, len(out.nodes), seq.num_draft, seq.draft_leaves
            base = len(seq.token_ids) - nd
            move = leaf_move(nd, leaves, out.nodes)
            if move is not None:  # offsets from the root, at position base - 1
                self.stats.leaves_accepted += 1
                engine.kv.move_entry(*(_slot(seq, engine.config.block_size, base - 1 + m)
                                           for m in move))
            del seq.token_ids[base:]
            seq.num_draft, seq.draft_probs, seq.draft_leaves = 0, None, []
            seq.num_computed_tokens = base  # the accepted drafts' KV is claimed one by one
            self.stats.add_round(nd, na, _depths_tested(nd, leaves, out.nodes))
            if self.adaptive:
                self._trackers.setdefault(seq.seq_id, AcceptanceTracker()).update(
                    nd - len(leaves), na)
            for t, tok in enumerate(toks):
                engine.emit(seq, tok, chosen[t], tops[t])
                self.stats.emitted += 1
                if seq.is_finished:
                    break
                if t < na:
                    seq.num_computed_tokens += 1
            if not seq.is_finished:
                engine.release_tail(seq)


def _tree_of(seq: Seq) -> tuple[list[int], list[tuple[int, int]]]:
    """A drafted row's tree: its chain, and its leaves as (parent, token)."""
    drafts = seq.token_ids[len(seq.token_ids) - seq.num_draft:]
    k = len(drafts) - len(seq.draft_leaves)
    return drafts[:k], list(zip(seq.draft_leaves, drafts[k:]))


def _accept_tree(seq: Seq, off: int, probs: torch.Tensor) -> TreeOutcome:
    """One tree row's sampled verification (``probs``: the step's processed distributions;
    its nodes' are rows ``off ..``): node ``i``'s test takes the uniform of its depth ``d`` at
    step ``step + d``, the chain's on ACCEPT_STREAM (as a chain's round), the ``j``-th leaf of a
    depth's on ``LEAF_STREAM + j``; the last draw RESAMPLE_STREAM's at ``step``."""
    chain, leaves = _tree_of(seq)
    st = seq.state
    seed, idx, step = int(st.rng_seed or 0), st.sample_index, st.step
    u = [0.0] + [uniform_for(seed, idx, step + d, ACCEPT_STREAM) for d in range(len(chain))]
    rank: dict[int, int] = {}
    for parent, _ in leaves:
        u.append(uniform_for(seed, idx, step + parent, LEAF_STREAM + rank.get(parent, 0)))
        rank[parent] = rank.get(parent, 0) + 1
    target = probs[off:off + 1 + len(chain) + len(leaves)].double()
    return tree_accept(chain, leaves, target, seq.draft_probs, u,
                       uniform_for(seed, idx, step, RESAMPLE_STREAM))


def _depths_tested(num_draft: int, parents: Sequence[int], nodes: Sequence[int]) -> int:
    """The depths a round tested: those of its accepted ``nodes`` and, unless it ended on a
    leaf (a bonus token follows it) or past its candidates, the next one."""
    k, na = num_draft - len(parents), len(nodes)
    if nodes and nodes[-1] > k:
        return na
    return na + int(na < k or na in parents)


def _slot(seq: Seq, block_size: int, pos: int) -> int:
    """The cache slot of position ``pos`` of ``seq`` (no token dropping: speculative rows)."""
    return seq.block_table[pos // block_size] * block_size + pos % block_size


def build_speculator(cfg: EngineConfig, target: CausalLM) -> Speculator | None:
    """The speculator ``cfg`` asks for: prompt lookup (``prompt_lookup`` = longest n-gram), a
    draft model (``speculative_model``, a folder with the target's vocabulary, on its own engine
    with the same block size, dtype and device, its weights quantized as
    ``speculative_quantization`` says), or None; ``adaptive_speculation`` chooses each
    row's ``k``, a draft step costing its weights' bytes over the ``target`` model's and a
    verified token as ``adaptive_k.verify_step_cost(target)``."""
    if cfg.prompt_lookup is not None:
        return Speculator(NgramProposer(max_ngram=cfg.prompt_lookup), cfg.num_speculative_tokens,
                          adaptive=cfg.adaptive_speculation, verify_cost=verify_step_cost(target))
    if cfg.speculative_model is None:
        return None
    from metagen.engine.config import EngineConfig
    from metagen.engine.draft_proposer import DraftModelProposer
    from metagen.engine.llm_engine import LLMEngine

    draft = LLMEngine.from_pretrained(cfg.speculative_model, EngineConfig(
        block_size=cfg.block_size, max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_model_len=cfg.max_model_len,
        dtype=cfg.dtype, device=cfg.device, hydragen=cfg.hydragen,
        hydragen_min_prefix=cfg.hydragen_min_prefix, quantization=cfg.speculative_quantization),
        tokenizer=False)
    vocab = target.cfg.vocab_size
    if draft.vocab_size != vocab:
        raise ModelLoadError(f"speculative_model {cfg.speculative_model!r} has a vocabulary of "
                             f"{draft.vocab_size} tokens; the target's has {vocab}")
    return Speculator(DraftModelProposer(draft, tree=cfg.speculative_tree),
                      cfg.num_speculative_tokens,
                      adaptive=cfg.adaptive_speculation,
                      draft_cost=draft_step_cost(draft.model, target),
                      verify_cost=verify_step_cost(target))
