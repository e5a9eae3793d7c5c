"""DraftModelProposer: drafts from a small model that runs on its own :class:`LLMEngine`.

The draft model needs its own KV cache (it is another model); it gets it as an ordinary engine
(block manager, radix cache, continuous batching), not a second kind of core. Every target
sequence that speculates has a mirror request on the draft engine (:mod:`metagen.engine.mirrors`)
whose rows are driven by :class:`DraftDriver` (:mod:`metagen.engine.request_driver`): each draft
step samples one token from the draft's processed distribution ``q`` (the target row's own
parameters, seeds and output so far, with counter-based uniforms on stream ``DRAFT_STREAM``)
and extends the mirror with it. At the start of a round the mirror follows the target:
``truncate`` to the common prefix (keeping the draft KV of the accepted drafts) then the
target's new tokens. A mirror is aborted when its target sequence finishes (its full blocks
stay in the draft's prefix cache).

With a ``tree`` (``EngineConfig.speculative_tree``), each draft step also names ``tree[d]``
candidates beside the draft at depth ``d``, from the same logits (no draft step of their own):
a greedy row's next best tokens by the draft's raw logits (any candidate is sound: the target's
argmax decides), a sampled row's draws from ``q`` without replacement after the draft
(:func:`~metagen.decoding.tree_speculative.draw_alternatives`, uniforms on streams
``ALT_STREAM + j``), as the tree rule requires. The mirror follows the chain alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from metagen.decoding import SequenceState, greedy_tokens, probs_for_sampling, uniforms_for
from metagen.decoding.processors import plain_greedy
from metagen.decoding.sampler import RowKernels, greedy_step
from metagen.decoding.rng import uniform_for
from metagen.decoding.speculative import sample_inverse_cdf
from metagen.decoding.tree_speculative import draw_alternatives
from metagen.engine import direct_steps
from metagen.engine.mirrors import Mirrors
from metagen.engine.proposers import Proposal
from metagen.engine.sequence import Request

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.outputs import RequestOutput
    from metagen.engine.sequence import Sequence as Seq

DRAFT_STREAM = 13  # rng stream of the draft tokens (metagen.decoding.rng)
ALT_STREAM = 80  # + j: the j-th candidate beside a sampled draft (a draft tree)


@dataclass(slots=True, eq=False)
class _Row:
    """One target row being drafted this round: its state, how many drafts it wants, and the
    drafts so far with their distributions ((V,) each; None for a greedy row's point mass) and
    the candidates beside each (a draft tree)."""

    state: SequenceState
    want: int
    tokens: list[int] = field(default_factory=list)
    probs: list[torch.Tensor | None] = field(default_factory=list)
    alts: list[list[int]] = field(default_factory=list)


class DraftDriver:
    """Drives every mirror request of one draft engine (see the module docstring); ``tree``:
    the candidates to name beside the draft at each depth."""

    def __init__(self, tree: Sequence[int] = ()) -> None:
        self.rows: dict[int, _Row] = {}  # mirror seq_id -> its row this round
        self.tree = tuple(tree)

    def on_logits(self, engine: LLMEngine, seqs: Sequence[Seq], logits: torch.Tensor) -> None:
        live = [(i, s, self.rows[s.seq_id]) for i, s in enumerate(seqs)
                if s.seq_id in self.rows and len(self.rows[s.seq_id].tokens) < self.rows[
                    s.seq_id].want]
        if not live:
            return
        sub = logits if len(live) == len(seqs) else logits[torch.tensor([i for i, _, _ in live])]
        states = [SequenceState(r.state.params, r.state.prompt_ids,
                                r.state.output_ids + r.tokens, r.state.sample_index,
                                r.state.eos_token_ids, r.state.bad_words_ids,
                                rng_seed=r.state.rng_seed, bad_text=r.state.bad_text)
                  for _, _, r in live]
        if all(s.params.is_greedy for s in states):
            tokens, dead = self._greedy(sub, states, engine.row_kernels())
            probs: torch.Tensor | None = None
        else:
            tokens, dead, probs = self._sampled(sub, states)
        alts = self._alternatives(sub, states, [len(r.tokens) for _, _, r in live], tokens, probs)
        for j, (_, seq, row) in enumerate(live):
            if dead[j]:
                row.want = len(row.tokens)  # nothing sensible to draft: stop here
                continue
            row.tokens.append(tokens[j])
            row.probs.append(None if probs is None else probs[j])
            row.alts.append(alts[j])
            if len(row.tokens) < row.want:
                engine.extend(seq.seq_id, [tokens[j]])

    def _alternatives(self, logits: torch.Tensor, states: list[SequenceState],
                      depths: list[int], tokens: list[int], probs: torch.Tensor | None
                      ) -> list[list[int]]:
        """The candidates beside each row's draft ``tokens[j]`` at its depth (module
        docstring): the next best by ``logits`` where ``probs`` is None (greedy rows), else
        draws from ``probs[j]`` without replacement."""
        widths = [self.tree[d] if d < len(self.tree) else 0 for d in depths]
        if not any(widths):
            return [[] for _ in depths]
        if probs is None:
            top = torch.topk(logits, min(max(widths) + 1, logits.shape[-1]), dim=-1).indices
            return [[t for t in top[j].tolist() if t != tokens[j]][:w]
                    for j, w in enumerate(widths)]
        out = []
        for j, (st, w) in enumerate(zip(states, widths)):
            u = [uniform_for(int(st.rng_seed or 0), st.sample_index, st.step, ALT_STREAM + i)
                 for i in range(w)]
            out.append(draw_alternatives(probs[j], tokens[j], w, u))
        return out

    @staticmethod
    def _greedy(logits: torch.Tensor, states: list[SequenceState], kernels: RowKernels | None
                ) -> tuple[list[int], list[bool]]:
        """Greedy rows: the processed argmax (the draft's ``q`` is a point mass on it). Rows
        that only end-token suppression can touch take one native argmax pass
        (:func:`~metagen.decoding.sampler.greedy_step`: the same tokens), which costs a fifth of
        the processing pipeline's passes over a 32000-token row; others, and a bad row, go
        through the pipeline."""
        if kernels is not None:
            got = greedy_step(logits, states, [plain_greedy(s) for s in states], kernels)
            if got is not None:
                return got[0], [False] * len(states)
        tokens, dead = greedy_tokens(logits, states)
        return tokens.tolist(), dead.tolist()

    @staticmethod
    def _sampled(logits: torch.Tensor, states: list[SequenceState]
                 ) -> tuple[list[int], list[bool], torch.Tensor]:
        """Any rows: a draw from each row's processed distribution ``q`` (returned, (B, V))."""
        q = probs_for_sampling(logits, states)  # (B, V)
        q = torch.nan_to_num(q, nan=0.0)
        dead = q.sum(dim=-1) <= 0
        u = torch.from_numpy(uniforms_for([s.rng_seed for s in states],  # type: ignore[misc]
                                          [s.sample_index for s in states],
                                          [s.step for s in states], DRAFT_STREAM))
        tokens = sample_inverse_cdf(q.masked_fill(dead[:, None], 1.0), u).tolist()
        return tokens, dead.tolist(), q

    def output(self, request: Request) -> RequestOutput:
        from metagen.engine.outputs import RequestOutput

        return RequestOutput(request.request_id, request.prompt_ids, [], [None])


class DraftModelProposer:
    """Drafts with ``draft`` (an engine over a small model with the target's vocabulary).

    ``direct``: a round whose mirrors are all running with little to catch up runs its draft
    steps directly (:mod:`metagen.engine.direct_steps`), without the step loop's per-step
    scheduling; same drafts, same draft KV. Off: every draft step is a :meth:`LLMEngine.step`.
    """

    def __init__(self, draft: LLMEngine, direct: bool = True, tree: Sequence[int] = ()) -> None:
        self.draft = draft
        self.direct = direct
        self.driver = DraftDriver(tree)
        self.mirrors = Mirrors(draft, self.driver)

    def propose(self, keys: Sequence[int], token_lists: Sequence[Sequence[int]],
                states: Sequence[SequenceState], ks: Sequence[int]) -> Proposal:
        kmax = max(ks, default=0)
        self.driver.rows.clear()
        for key, tokens, state, k in zip(keys, token_lists, states, ks):
            want = min(k, self.draft.max_model_len - len(tokens) - 1)
            seq = self.mirrors.sync(key, tokens) if want > 0 else None
            if seq is not None:
                self.driver.rows[seq.seq_id] = _Row(state, want)
        rows = dict(self.driver.rows)
        while any(len(r.tokens) < r.want for r in rows.values()):
            if self.direct and self._direct_steps(rows):
                continue
            before = sum(len(r.tokens) for r in rows.values())
            self.draft.step()
            if sum(len(r.tokens) for r in rows.values()) == before and \
                    not self.draft.scheduler.has_work():
                break  # nothing could run (cannot happen with a sane cache): stop drafting
        by_key = {self.mirrors.key_of(self.draft.seqs[sid]): r for sid, r in rows.items()}
        self.driver.rows.clear()
        return self._proposal([by_key.get(key) for key in keys], kmax)

    def _direct_steps(self, rows: dict[int, _Row]) -> bool:
        """Draft the rest of ``rows``' drafts through direct steps
        (:mod:`metagen.engine.direct_steps`) if the rows still drafting qualify and the cache
        holds their steps; False (nothing drafted) otherwise: the step loop's turn. Each step
        hands the logits to the driver as the step loop does, so the drafts and the draft KV
        are the step loop's."""
        eng = self.draft
        wanting = [(eng.seqs[sid], r.want - len(r.tokens)) for sid, r in rows.items()
                   if len(r.tokens) < r.want]
        live = [s for s, _ in wanting]
        if not direct_steps.eligible(eng, live) or not direct_steps.reserve(
                eng, live, [n for _, n in wanting]):
            return False
        while live:
            self.driver.on_logits(eng, live, direct_steps.forward(eng, live))
            live = [s for s in live if s.num_uncomputed]  # extended: it drafts again
        return True

    def _proposal(self, rows: list[_Row | None], kmax: int) -> Proposal:
        """The drafts of ``rows`` (None: no drafts). ``probs`` is None when every draft is a
        greedy row's point mass; otherwise (B, K, V) with those point masses written out."""
        b = len(rows)
        drafts = torch.zeros(b, kmax, dtype=torch.long)  # (B, K)
        num = torch.zeros(b, dtype=torch.long)
        sampled = any(p is not None for r in rows if r is not None for p in r.probs)
        probs = torch.zeros(b, kmax, self.draft.vocab_size) if sampled else None  # (B, K, V)
        alternatives = [[] if r is None else r.alts for r in rows] if self.driver.tree else None
        for j, r in enumerate(rows):
            if r is None or not r.tokens:
                continue
            n = len(r.tokens)
            drafts[j, :n] = torch.tensor(r.tokens, dtype=torch.long)
            num[j] = n
            if probs is not None:
                for t, (tok, q) in enumerate(zip(r.tokens, r.probs)):
                    if q is None:
                        probs[j, t, tok] = 1.0
                    else:
                        probs[j, t] = q
        return Proposal(drafts, num, probs, alternatives)

    def forget(self, key: int) -> None:
        self.mirrors.forget(key)
