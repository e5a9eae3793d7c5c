"""Beam searches as request drivers of the engine: beam, diverse beam, stochastic beam.

A beam-search request (``LLMEngine.add_request(ids, BeamSearchParams(...))``) runs inside the
engine's continuous batching next to any other request; the driver holds the beam states (the
math is in :mod:`metagen.decoding.beam`) and turns each step's moves into engine operations. The
prompt is prefilled once; each step, once the logits of every live beam are ready (a beam computed
earlier than its siblings is parked), the step function picks the new beams; a beam continuing
with ``c`` children is forked ``c - 1`` times (the children share its KV blocks, the scheduler
copies a shared block only when a child writes into it) and each child is extended by its token;
a beam without children is finished (its full blocks go to the prefix cache). The groups of a
diverse beam search step in order, each penalised by the tokens the earlier groups chose at this
step (Hamming diversity).

Scores are raw model log-probabilities (no temperature or truncation), as in transformers' beam
search without logits processors; plain beam search equals transformers' ``generate(num_beams=
...)``. The request's :class:`~metagen.engine.outputs.RequestOutput` holds, best first, the
``num_return_sequences`` best hypotheses (stochastic: the ``num_beams`` sampled sequences by
perturbed score) as completions: ``token_ids`` the generated tokens (EOS included), ``text``
their text (empty without a tokenizer), ``cumulative_logprob`` the beam score (the
length-penalised ``sum logprob / length ** length_penalty``; stochastic: the sequence's summed
log-probability), ``logprobs`` None (per-token values are not tracked), ``finish_reason`` "stop"
when it ended with an end token, else "length".

With an output constraint, each step's log-probabilities are renormalized over the tokens the
language allows. With token healing (the request runs on the prompt without its healed tokens),
a beam still re-producing the removed text may take only the tokens that extend it
(:mod:`metagen.decoding.healing`), scored by the model's own log-probabilities (not
renormalized: every hypothesis heals the same text, so the search ranks them by their
probability given the prompt's text); a hypothesis's ``text`` starts where the prompt ended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from metagen.beam_params import BeamSearchParams
from metagen.decoding.beam import (
    BeamKernels, BeamMove, BeamParams, BeamState, Finished, StochasticBeamState, beam_step,
    beam_step_from, best_hypotheses, candidate_count, diversity_penalty, stochastic_beam_step)
from metagen.decoding.constraint_mask import apply_constraints
from metagen.decoding.healing import text_after
from metagen.decoding.processors import apply_healing
from metagen.decoding.state import SequenceState, fresh_seed
from metagen.engine.outputs import RequestOutput
from metagen.errors import NumericalError
from metagen.types import Completion

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.sequence import Request, Sequence as Seq


class BeamDriver:
    """Beam search (``num_beam_groups`` 1) or diverse beam search over one request.

    ``groups[g]`` are the live sequences of group ``g`` in ``states[g].running`` order; before
    the first step every group holds the prompt's one sequence. ``healed``: the prompt tokens
    token healing removed after ``prompt_ids``."""

    def __init__(self, params: BeamSearchParams, eos_token_ids: tuple[int, ...],
                 tokenizer: Any, prompt_ids: Sequence[int], healed: Sequence[int] = ()) -> None:
        self.params = BeamParams.of(params, eos_token_ids)
        self.tokenizer, self.prompt_ids, self.healed = tokenizer, list(prompt_ids), tuple(healed)
        g = self.params.num_beam_groups
        self.states = [BeamState(self.params.group_size) for _ in range(g)]
        self.groups: list[list[Seq]] | None = None  # set at the first logits
        self.ready: dict[int, torch.Tensor] = {}  # seq_id -> logits (V,) of this step
        self.error: Exception | None = None

    @property
    def done(self) -> bool:
        return all(s.done for s in self.states)

    def _live(self) -> list[Seq]:
        assert self.groups is not None
        out: dict[int, Seq] = {}
        for g, seqs in enumerate(self.groups):
            if not self.states[g].done:
                out.update((s.seq_id, s) for s in seqs)
        return list(out.values())

    def on_logits(self, engine: LLMEngine, seqs: Sequence[Seq], logits: torch.Tensor) -> None:
        if self.groups is None:  # the prompt's prefill: every group starts from its sequence
            self.groups = [[seqs[0]] for _ in self.states]
        for seq, row in zip(seqs, logits):
            self.ready[seq.seq_id] = row
        live = self._live()
        if any(s.seq_id not in self.ready for s in live):
            return  # wait (parked) until every live beam has its logits
        if len(seqs) == len(live) and all(a is b for a, b in zip(seqs, live)):
            rows = logits  # every live beam's logits came in this call, in order
        else:
            rows = torch.stack([self.ready[s.seq_id] for s in live])  # (W, V)
        self.ready.clear()
        kernels = engine.row_kernels() if self._plain(live) else None
        if kernels is not None and rows.dtype == torch.float32:
            steps = self._step_native(kernels, rows)
        else:
            steps = self._step(live, rows)
        if steps is None:
            self._fail(engine, live, NumericalError("beam search: logits contain NaN or no "
                                                    "finite value"))
            return
        stepped = [g for g, _ in steps]
        moves = [(self.groups[g], move) for g, move in steps]
        for g, beams in zip(stepped, advance(engine, live, moves)):
            self.groups[g] = beams

    def _plain(self, live: list[Seq]) -> bool:
        """One group, and no beam with an output constraint or healing: each step ranks the
        beams' raw log-probabilities."""
        return len(self.states) == 1 and all(
            st.constraint is None and st.heal is None for st in live_states(live))

    def _step_native(self, kernels: BeamKernels, rows: torch.Tensor
                     ) -> list[tuple[int, BeamMove]] | None:
        """The one group's step from its candidates found in C (one pass per row for the
        logsumexp, one for the row's best logits; no log-softmax or top-k over every row);
        None when a row holds NaN or +inf or no finite value."""
        state = self.states[0]
        got = kernels.beam_top(rows, state.scores, candidate_count(state.width, self.params))
        if got is None:
            return None
        self.states[0], move = beam_step_from(state, got[0], got[1], rows.shape[1], self.params)
        return [(0, move)]

    def _step(self, live: list[Seq], rows: torch.Tensor) -> list[tuple[int, BeamMove]] | None:
        """Every unfinished group's step over the live beams' log-probabilities (constrained,
        healed, each group penalised by the tokens the groups before it chose); None when a row
        holds NaN or +inf or no finite value."""
        assert self.groups is not None
        log_probs = apply_healing(torch.log_softmax(constrained(rows, live).float(), dim=-1),
                                  live_states(live))
        # log_probs hold NaN iff a row held NaN or +inf, or no finite value; their sum is NaN
        # iff one of them is (log-softmax gives no +inf, so -inf entries only sum to -inf)
        if math.isnan(float(log_probs.sum())):
            return None
        index = {s.seq_id: i for i, s in enumerate(live)}
        chosen: list[int] = []
        steps: list[tuple[int, BeamMove]] = []
        for g, state in enumerate(self.states):
            if state.done:
                continue
            lp = log_probs[[index[s.seq_id] for s in self.groups[g]]]  # (W_g, V)
            lp = diversity_penalty(lp, chosen, self.params.diversity_penalty)
            self.states[g], move = beam_step(state, lp, self.params)
            chosen.extend(move.tokens)
            steps.append((g, move))
        return steps

    def _fail(self, engine: LLMEngine, live: list[Seq], error: Exception) -> None:
        self.error = error
        self.states = [replace(s, done=True) for s in self.states]
        for seq in live:
            seq.error = error
            engine.finish(seq.seq_id, "error")

    def hypotheses(self) -> list[Finished]:
        return best_hypotheses(self.states, self.params.num_return_sequences)

    def output(self, request: Request) -> RequestOutput:
        hyps = self.hypotheses()
        comps = [_completion(self.tokenizer, self.prompt_ids, self.healed, h.tokens, h.score,
                             self.params.eos_token_ids) for h in hyps]
        return RequestOutput(request.request_id, request.prompt_ids, comps,
                             [self.error] * max(len(comps), 1 if self.error else 0),
                             request.num_cached_tokens)


class StochasticBeamDriver:
    """Stochastic beam search (Kool et al. 2019) over one request; randomness from a
    ``torch.Generator`` seeded with ``params.seed`` (a fresh seed when None), so a request's
    sample does not depend on the others in the batch. ``healed`` as for :class:`BeamDriver`."""

    def __init__(self, params: BeamSearchParams, eos_token_ids: tuple[int, ...],
                 tokenizer: Any, prompt_ids: Sequence[int], healed: Sequence[int] = ()) -> None:
        self.params = BeamParams.of(params, eos_token_ids)
        self.tokenizer, self.prompt_ids, self.healed = tokenizer, list(prompt_ids), tuple(healed)
        seed = params.seed if params.seed is not None else fresh_seed()
        self.gen = torch.Generator().manual_seed(seed)
        self.state = StochasticBeamState(params.num_beams)
        self.beams: list[Seq] = []  # live sequences, in state.running_index order
        self.ready: dict[int, torch.Tensor] = {}
        self.error: Exception | None = None

    def on_logits(self, engine: LLMEngine, seqs: Sequence[Seq], logits: torch.Tensor) -> None:
        if not self.beams:
            self.beams = [seqs[0]]
        for seq, row in zip(seqs, logits):
            self.ready[seq.seq_id] = row
        if any(s.seq_id not in self.ready for s in self.beams):
            return
        rows = constrained(torch.stack([self.ready[s.seq_id] for s in self.beams]),
                           self.beams)  # (R, V)
        self.ready.clear()
        lp = apply_healing(torch.log_softmax(rows.double(), dim=-1), live_states(self.beams))
        if math.isnan(float(lp.sum())):  # a row held NaN or +inf, or no finite value
            self.error = NumericalError("stochastic beam search: logits contain NaN or no "
                                        "finite value")
            self.state = StochasticBeamState(self.state.k, (), (), (), (), done=True)
            for seq in self.beams:
                seq.error = self.error
                engine.finish(seq.seq_id, "error")
            return
        u = torch.rand(lp.shape, generator=self.gen, dtype=torch.float64)
        self.state, move = stochastic_beam_step(self.state, lp, u, self.params)
        self.beams = advance(engine, self.beams, [(self.beams, move)])[0]

    def output(self, request: Request) -> RequestOutput:
        s = self.state
        comps = [_completion(self.tokenizer, self.prompt_ids, self.healed, b, lp,
                             self.params.eos_token_ids) for b, lp in zip(s.beams, s.logprobs)]
        return RequestOutput(request.request_id, request.prompt_ids, comps,
                             [self.error] * len(comps) if comps else [self.error],
                             request.num_cached_tokens)


def live_states(beams: Sequence[Seq]) -> list[SequenceState]:
    return [s.state for s in beams]


def constrained(rows: torch.Tensor, beams: Sequence[Seq]) -> torch.Tensor:
    """``rows`` (one per beam) with what each beam's output constraint forbids set to -inf
    (unchanged without a constraint): the log-softmax after it renormalizes over the language."""
    states = live_states(beams)
    if all(st.constraint is None for st in states):
        return rows
    return apply_constraints(rows, states)


def advance(engine: LLMEngine, live: list[Seq], moves: list[tuple[list[Seq], BeamMove]]
            ) -> list[list[Seq]]:
    """Apply ``moves`` (each: a group's beams and its move, new beam i = beams[parents[i]] +
    tokens[i]) through the engine: every live sequence with ``c`` children in all groups is
    forked ``c - 1`` times and each child extended by its token; a live sequence without
    children is finished. Returns each group's new beams."""
    want: dict[int, int] = {}
    for beams, move in moves:
        for p in move.parents:
            sid = beams[p].seq_id
            want[sid] = want.get(sid, 0) + 1
    pool: dict[int, list[int]] = {}
    for seq in live:
        c = want.get(seq.seq_id, 0)
        if c == 0:
            engine.finish(seq.seq_id, "stop")
        else:
            pool[seq.seq_id] = [seq.seq_id] + engine.fork(seq.seq_id, c - 1)
    out: list[list[Seq]] = []
    for beams, move in moves:
        group = []
        for p, tok in zip(move.parents, move.tokens):
            sid = pool[beams[p].seq_id].pop()
            engine.extend(sid, [tok])
            group.append(engine.seqs[sid])
        out.append(group)
    return out


def _completion(tokenizer: Any, prompt_ids: list[int], healed: tuple[int, ...],
                tokens: Sequence[int], score: float, eos: tuple[int, ...]) -> Completion:
    text = ""
    if tokenizer is not None and tokens:
        ctx = prompt_ids[-8:]

        def decode(ids: Sequence[int]) -> str:
            return str(tokenizer.decode(list(ids), skip_special_tokens=True))

        text = text_after(decode(ctx + list(healed)), decode(ctx + list(tokens)),
                          lambda: decode(tokens), partial=bool(healed))
    ended = bool(tokens) and tokens[-1] in eos
    return Completion(text=text, token_ids=tuple(tokens), logprobs=None,
                      cumulative_logprob=float(score) if math.isfinite(score) else None,
                      finish_reason="stop" if ended else "length")


def make_beam_driver(params: BeamSearchParams, eos_token_ids: tuple[int, ...], tokenizer: Any,
                     prompt_ids: Sequence[int], healed: Sequence[int] = ()
                     ) -> BeamDriver | StochasticBeamDriver:
    cls = StochasticBeamDriver if params.stochastic else BeamDriver
    return cls(params, eos_token_ids, tokenizer, prompt_ids, healed)


def beam_search(engine: LLMEngine, prompts: Sequence[Sequence[int]], params: BeamSearchParams
                ) -> list[list[Finished]]:
    """Run one beam-search request per prompt (together, in the engine's batch) to completion;
    per prompt, the ``num_return_sequences`` best hypotheses, best first."""
    rids = [engine.add_request(p, params) for p in prompts]
    drivers = [engine.requests[r].driver for r in rids]
    engine.run_until_done(rids)
    return [d.hypotheses() for d in drivers]


def stochastic_beam_search(engine: LLMEngine, prompts: Sequence[Sequence[int]],
                           params: BeamSearchParams, seed: int = 0) -> list[StochasticBeamState]:
    """Stochastic beam search for every prompt (prompt ``i`` seeded ``seed + i``); returns each
    prompt's final state: ``beams`` (k distinct sampled sequences, highest perturbed score
    first), ``logprobs`` and ``keys``."""
    rids = [engine.add_request(p, replace(params, stochastic=True, seed=seed + i))
            for i, p in enumerate(prompts)]
    drivers = [engine.requests[r].driver for r in rids]
    engine.run_until_done(rids)
    return [d.state for d in drivers]
