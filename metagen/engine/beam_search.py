"""Token-level beam searches on the engine: beam, diverse beam, stochastic beam.

The drivers hold the state; the math is in :mod:`metagen.decoding.beam`. Every step runs ONE
extend forward for all live beams of all prompts (and all groups); a beam that continues with
``c`` children is forked ``c - 1`` times (the children share its KV blocks; the engine copies a
shared block only when a child writes into it), a beam without children is released, and its full
blocks go to the prefix cache. Beams of different prompts are never mixed.

- :func:`beam_search` — beam search (length penalty, early stopping, n best), equal to
  ``transformers``' ``generate(num_beams=...)``; with ``num_beam_groups > 1`` and a
  ``diversity_penalty`` it is diverse beam search (Vijayakumar et al. 2018): groups step in order
  and each is penalised by the tokens the earlier groups chose at this step (Hamming diversity).
- :func:`stochastic_beam_search` — Kool et al. 2019: ``k`` sequences sampled without replacement.

Scores are raw model log-probabilities (no temperature or truncation), as in transformers' beam
search without logits processors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.decoding.beam import (
    BeamMove, BeamParams, BeamState, Finished, StochasticBeamState, beam_step, best_hypotheses,
    diversity_penalty, stochastic_beam_step)
from metagen.engine.speculative_decoding import PagedSeq, PagedSession
from metagen.errors import InvalidPromptError


def _advance(session: PagedSession, handles: list[PagedSeq], move: BeamMove,
             done: bool) -> list[PagedSeq]:
    """New handles for ``move``: fork parents with several children, release childless ones."""
    if done:
        for h in handles:
            session.release(h)
        return []
    children: dict[int, int] = {}
    for p in move.parents:
        children[p] = children.get(p, 0) + 1
    pool: dict[int, list[PagedSeq]] = {}
    for p, h in enumerate(handles):
        c = children.get(p, 0)
        if c == 0:
            session.release(h)
        else:
            pool[p] = [h] + session.fork(h, c - 1)
    out = []
    for p, tok in zip(move.parents, move.tokens):
        h = pool[p].pop()
        h.tokens.append(tok)
        out.append(h)
    return out


def _check_prompts(prompts: Sequence[Sequence[int]]) -> None:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InvalidPromptError("prompts", [len(p) for p in prompts] if prompts else prompts,
                                 "need at least one non-empty prompt")


def beam_search(session: PagedSession, prompts: Sequence[Sequence[int]],
                params: BeamParams) -> list[list[Finished]]:
    """Beam search (or diverse beam search) for every prompt; returns, per prompt, the
    ``params.num_return_sequences`` best finished hypotheses, best first (generated tokens,
    EOS included; length-penalised score; summed log-prob)."""
    _check_prompts(prompts)
    n_groups = params.num_beam_groups
    states: list[list[BeamState]] = []
    handles: list[list[list[PagedSeq]]] = []
    for prompt in prompts:
        root = session.start(prompt)
        states.append([BeamState(params.group_size) for _ in range(n_groups)])
        handles.append([[root]] + [[h] for h in session.fork(root, n_groups - 1)])
    while True:
        live = [(p, g) for p in range(len(prompts)) for g in range(n_groups)
                if not states[p][g].done]
        if not live:
            break
        batch = [h for p, g in live for h in handles[p][g]]
        logits = torch.cat(session.extend(batch))  # (sum of live beams, V)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        offsets, off = {}, 0
        for p, g in live:
            offsets[(p, g)] = off
            off += len(handles[p][g])
        for p in range(len(prompts)):
            chosen: list[int] = []
            for g in range(n_groups):
                if states[p][g].done:
                    continue
                o, w = offsets[(p, g)], len(handles[p][g])
                lp = diversity_penalty(log_probs[o:o + w], chosen, params.diversity_penalty)
                states[p][g], move = beam_step(states[p][g], lp, params)
                chosen.extend(move.tokens)
                handles[p][g] = _advance(session, handles[p][g], move, states[p][g].done)
    return [best_hypotheses(s, params.num_return_sequences) for s in states]


def stochastic_beam_search(session: PagedSession, prompts: Sequence[Sequence[int]],
                           params: BeamParams, seed: int = 0) -> list[StochasticBeamState]:
    """Stochastic beam search with ``k = params.num_beams`` (Kool et al. 2019). Returns each
    prompt's final state: ``beams`` (k sampled sequences, distinct, highest perturbed score
    first), ``logprobs`` and ``keys``. Randomness: a ``torch.Generator`` seeded with
    ``seed + prompt index``, so a prompt's sample does not depend on the others."""
    _check_prompts(prompts)
    gens = [torch.Generator().manual_seed(seed + i) for i in range(len(prompts))]
    states = [StochasticBeamState(params.num_beams) for _ in prompts]
    handles = [[session.start(p)] for p in prompts]
    while True:
        live = [p for p in range(len(prompts)) if not states[p].done]
        if not live:
            break
        logits = torch.cat(session.extend([h for p in live for h in handles[p]]))
        log_probs = torch.log_softmax(logits.double(), dim=-1)
        off = 0
        for p in live:
            r = len(handles[p])
            lp = log_probs[off:off + r]
            off += r
            u = torch.rand(lp.shape, generator=gens[p], dtype=torch.float64)
            states[p], move = stochastic_beam_step(states[p], lp, u, params)
            handles[p] = _advance(session, handles[p], move, states[p].done)
    return states
