"""Token-level beam searches as pure bookkeeping over log-probabilities.

The functions here never call a model: a driver (``metagen.engine.beam_search``) runs the forward
pass for the live beams, hands their next-token log-probabilities ``(W, V)`` to a step function,
and gets back a new state plus, for every new live beam, the index of the beam it extends
(``parents``) and its new token, which it turns into engine forks. State objects are immutable
values; every step returns a new one.

- :func:`beam_step` (or :func:`beam_step_from`, from the step's best candidates) — beam search
  with length penalty and the three early-stopping modes, reproducing ``transformers``' beam
  search step for step (keep ``(1 + #eos) * W`` candidates, continue the best ``W`` unfinished
  ones, admit finished ones among the top ``W``, stop when no running beam can beat the worst
  finished one).
- :func:`diversity_penalty` — Hamming diversity between groups for diverse beam search
  (Vijayakumar et al. 2018, "Diverse Beam Search"); each group is an ordinary beam state.
- :func:`stochastic_beam_step` — stochastic beam search with the Gumbel-top-k trick (Kool et al.
  2019, "Stochastic Beams and Where to Find Them"): the final beams are a sample *without
  replacement* of ``k`` sequences from the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, Union

import torch

from metagen.beam_params import MAX_BEAMS, BeamSearchParams
from metagen.errors import InvalidParameterError

NEG = -1.0e9    # transformers' "impossible" score; kept so ties and stops match it exactly

EarlyStopping = Union[bool, Literal["never"]]


@dataclass(slots=True, frozen=True)
class BeamParams:
    """Beam search configuration, validated on construction (V18).

    ``early_stopping``: True stops as soon as ``num_beams`` hypotheses are finished; False stops
    when the best running beam, scored at the current length, cannot beat the worst finished one;
    "never" uses the best reachable length for a positive length penalty (the canonical rule).
    Finished scores are ``sum logprob / generated_length ** length_penalty``.
    ``num_beam_groups`` > 1 with ``diversity_penalty`` > 0 is diverse beam search.
    """

    num_beams: int
    max_tokens: int
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    num_beam_groups: int = 1
    diversity_penalty: float = 0.0
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_beams", "max_tokens", "num_return_sequences", "num_beam_groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(name, value, "must be an integer >= 1")
        if self.num_beams > MAX_BEAMS:
            raise InvalidParameterError("num_beams", self.num_beams, f"at most {MAX_BEAMS}")
        if self.num_return_sequences > self.num_beams:
            raise InvalidParameterError(
                "num_return_sequences", self.num_return_sequences,
                f"must not exceed num_beams={self.num_beams}")
        if self.num_beams % self.num_beam_groups:
            raise InvalidParameterError("num_beam_groups", self.num_beam_groups,
                                        f"must divide num_beams={self.num_beams}")
        for name in ("length_penalty", "diversity_penalty"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not math.isfinite(value):
                raise InvalidParameterError(name, value, "must be a finite number")
        if self.diversity_penalty < 0:
            raise InvalidParameterError("diversity_penalty", self.diversity_penalty, "must be >= 0")
        if self.early_stopping not in (True, False, "never"):
            raise InvalidParameterError("early_stopping", self.early_stopping,
                                        "must be True, False or 'never'")
        object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))

    @property
    def group_size(self) -> int:
        return self.num_beams // self.num_beam_groups

    @classmethod
    def of(cls, params: BeamSearchParams, eos_token_ids: tuple[int, ...]) -> BeamParams:
        """The bookkeeping parameters of a (validated) request and the model's end tokens."""
        return cls(params.num_beams, params.max_tokens, params.num_return_sequences,
                   params.length_penalty, params.early_stopping, params.num_beam_groups,
                   params.diversity_penalty, tuple(eos_token_ids))


@dataclass(slots=True, frozen=True)
class Finished:
    """A finished hypothesis: generated tokens (EOS included), its ranking score, its log-prob."""

    tokens: tuple[int, ...]
    score: float
    logprob: float


@dataclass(slots=True, frozen=True)
class BeamState:
    """One beam (or one group of a diverse beam): live beams, finished hypotheses, stop flag.

    ``running[i]`` are beam ``i``'s generated tokens and ``scores[i]`` its summed log-prob.
    ``finished`` holds at most ``width`` hypotheses, best first.
    """

    width: int
    running: tuple[tuple[int, ...], ...] = ((),)
    scores: tuple[float, ...] = (0.0,)
    finished: tuple[Finished, ...] = ()
    improvable: bool = True
    done: bool = False
    step: int = 0


class BeamKernels(Protocol):
    """A step's candidates found without the full log-probability matrix (``sample_rows.c`` on
    CPU): ``beam_top(x, scores, keep)`` gives the ``keep`` best ``(values, flat indices)`` that
    :func:`beam_step_from` takes, from the RAW logits ``x`` (W, V) of beams with running
    ``scores``, or None when a row holds NaN or +inf or no finite value."""

    def beam_top(self, x: torch.Tensor, scores: Sequence[float], keep: int
                 ) -> tuple[list[float], list[int]] | None: ...


@dataclass(slots=True, frozen=True)
class BeamMove:
    """How live beams evolved in one step: new beam ``i`` = old beam ``parents[i]`` followed by
    ``tokens[i]``."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]


def candidate_count(width: int, params: BeamParams) -> int:
    """How many of a step's best continuations :func:`beam_step_from` needs for ``width``
    beams: ``(1 + #eos) * width`` (at least ``2 * width``), so that ``width`` of them continue
    even when each end token takes one (transformers' rule)."""
    return max(2, 1 + len(params.eos_token_ids)) * width


def beam_step(state: BeamState, log_probs: torch.Tensor, params: BeamParams
              ) -> tuple[BeamState, BeamMove]:
    """One beam-search step. ``log_probs`` (W_live, V) are the next-token log-probs of
    ``state.running`` (already processed and, for diverse beam search, penalised).

    Returns the new state and the move; when the new state is ``done`` the move is empty.
    """
    if log_probs.dim() != 2 or log_probs.shape[0] != len(state.running):
        raise InvalidParameterError("log_probs", tuple(log_probs.shape),
                                    f"must be ({len(state.running)}, V)")
    vocab = log_probs.shape[1]
    acc = log_probs.to(torch.float32) + torch.tensor(state.scores, dtype=torch.float32,
                                                     device=log_probs.device)[:, None]
    keep = candidate_count(state.width, params)
    top_lp, top_idx = torch.topk(acc.reshape(-1), k=min(keep, acc.numel()))  # (K,)
    return beam_step_from(state, top_lp.tolist(), top_idx.tolist(), vocab, params)


def beam_step_from(state: BeamState, top: Sequence[float], flat: Sequence[int], vocab: int,
                   params: BeamParams) -> tuple[BeamState, BeamMove]:
    """:func:`beam_step` from the step's best candidates: ``top`` the
    :func:`candidate_count` (or all, if fewer) best values of ``state.scores[i] + log_probs[i,
    t]``, best first, and ``flat`` their ``i * vocab + t``. A driver that finds them without
    the full log-probability matrix (one pass per row in C) steps here."""
    w = state.width
    parents = [f // vocab for f in flat]
    tokens = [f % vocab for f in flat]
    gen_len = state.step + 1
    eos = set(params.eos_token_ids)
    hits = [t in eos or gen_len >= params.max_tokens for t in tokens]

    # (e) continue the best `width` candidates that did not finish (ties: the better-ranked one)
    masked = [s + (NEG if h else 0.0) for s, h in zip(top, hits)]
    order = sorted(range(len(masked)), key=lambda i: -masked[i])[:w]
    new_running = tuple(state.running[parents[i]] + (tokens[i],) for i in order)
    new_scores = tuple(masked[i] for i in order)
    move = BeamMove(tuple(parents[i] for i in order), tuple(tokens[i] for i in order))

    # (f) admit finished candidates ranked among the top `width`
    finished = list(state.finished)
    full = len(finished) == w and params.early_stopping is True
    if state.improvable and not full:
        norm = gen_len ** params.length_penalty
        for i in range(min(w, len(tokens))):
            if hits[i]:
                finished.append(Finished(state.running[parents[i]] + (tokens[i],),
                                         top[i] / norm, top[i]))
        finished = sorted(finished, key=lambda f: -f.score)[:w]  # stable: older first on ties

    # (g) can a running beam still beat the worst finished hypothesis?
    improvable = state.improvable
    if improvable and len(finished) == w:
        if params.early_stopping == "never" and params.length_penalty > 0.0:
            best_len = params.max_tokens
        else:
            best_len = gen_len
        best_running = new_scores[0] / (best_len ** params.length_penalty)
        improvable = best_running > min(f.score for f in finished)
    all_done = len(finished) == w and params.early_stopping is True
    done = (not improvable) or all_done or all(hits)
    new = BeamState(w, new_running, new_scores, tuple(finished), improvable, done, gen_len)
    return new, (BeamMove((), ()) if done else move)


def best_hypotheses(states: list[BeamState], n: int) -> list[Finished]:
    """The ``n`` best finished hypotheses over one or several (group) states, best first."""
    pool = [f for s in states for f in s.finished]
    return sorted(pool, key=lambda f: -f.score)[:n]


def diversity_penalty(log_probs: torch.Tensor, previous_tokens: list[int],
                      penalty: float) -> torch.Tensor:
    """Hamming diversity (Vijayakumar et al. 2018): subtract ``penalty`` times the number of
    times each token was chosen at this step by earlier groups. ``log_probs`` (W, V) -> (W, V)."""
    if not previous_tokens or penalty == 0.0:
        return log_probs
    counts = torch.bincount(torch.tensor(previous_tokens, device=log_probs.device),
                            minlength=log_probs.shape[-1])
    return log_probs - penalty * counts.to(log_probs.dtype)[None, :]


# ---- Gumbel-top-k and stochastic beam search (Kool et al. 2019) -------------------------------

def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise from uniforms in (0, 1): ``-log(-log(u))``."""
    tiny = torch.finfo(u.dtype).tiny
    return -torch.log(-torch.log(u.clamp(min=tiny, max=1.0 - 1e-16 if u.dtype == torch.float64
                                          else 1.0 - 1e-7)))


def gumbel_top_k(log_probs: torch.Tensor, k: int, gumbels: torch.Tensor) -> torch.Tensor:
    """Indices of ``k`` items sampled without replacement from ``softmax(log_probs)`` over the
    last dimension (the Gumbel-top-k trick): the top-k of ``log_probs + gumbels``. (..., N)."""
    return torch.topk(log_probs + gumbels, k=k, dim=-1)[1]


def truncated_gumbel(perturbed: torch.Tensor, maximum: torch.Tensor) -> torch.Tensor:
    """Condition independent Gumbels ``perturbed`` (W, V) on their row maximum being
    ``maximum`` (W,): Kool et al. 2019, eq. (23), in its numerically stable form."""
    z = perturbed.max(dim=-1, keepdim=True)[0]  # (W, 1)
    t = maximum.unsqueeze(-1)  # (W, 1)
    v = t - perturbed + torch.log1p(-torch.exp((perturbed - z).clamp(max=0.0))
                                    .clamp(max=1.0 - 1e-12))
    out = t - v.clamp(min=0.0) - torch.log1p(torch.exp(-v.abs()))
    return torch.where(perturbed == z, t.expand_as(perturbed), out)


@dataclass(slots=True, frozen=True)
class StochasticBeamState:
    """Beams of stochastic beam search: ``beams[i]`` tokens, ``logprobs[i]`` summed log-prob
    (phi), ``keys[i]`` the perturbed log-prob G, ``is_finished[i]``. Sorted by key, descending."""

    k: int
    beams: tuple[tuple[int, ...], ...] = ((),)
    logprobs: tuple[float, ...] = (0.0,)
    keys: tuple[float, ...] = (0.0,)
    is_finished: tuple[bool, ...] = (False,)
    step: int = 0
    done: bool = False
    running_index: tuple[int, ...] = field(default=(0,))  # beam index -> row of the next log_probs


def stochastic_beam_step(state: StochasticBeamState, log_probs: torch.Tensor,
                         uniforms: torch.Tensor, params: BeamParams
                         ) -> tuple[StochasticBeamState, BeamMove]:
    """One step of stochastic beam search. ``log_probs`` (R, V) for the R running (unfinished)
    beams in ``state.running_index`` order; ``uniforms`` (R, V) in (0, 1).

    Finished beams compete with the children by their key and are never expanded; when all
    ``k`` beams are finished (EOS or ``max_tokens``) the state is done. The move's parents index
    the rows of ``log_probs``.
    """
    running = [i for i, f in enumerate(state.is_finished) if not f]
    if log_probs.shape[0] != len(running) or uniforms.shape != log_probs.shape:
        raise InvalidParameterError("log_probs", tuple(log_probs.shape),
                                    f"must be ({len(running)}, V) like uniforms")
    lp = log_probs.to("cpu", torch.float64)  # the keys are float64 bookkeeping on the host
    phi = torch.tensor([state.logprobs[i] for i in running], dtype=torch.float64)[:, None] + lp
    g = torch.tensor([state.keys[i] for i in running], dtype=torch.float64)
    keys = truncated_gumbel(phi + gumbel_from_uniform(uniforms.to(torch.float64)), g)
    keys = torch.where(torch.isfinite(phi), keys, torch.full_like(keys, -math.inf))
    vocab = lp.shape[1]
    fin = [i for i, f in enumerate(state.is_finished) if f]
    all_keys = torch.cat([keys.reshape(-1), torch.tensor([state.keys[i] for i in fin],
                                                         dtype=torch.float64)])
    order = torch.topk(all_keys, k=min(state.k, int(torch.isfinite(all_keys).sum())))[1].tolist()
    eos = set(params.eos_token_ids)
    beams, logps, ks, finished, parents, tokens = [], [], [], [], [], []
    n_children = keys.numel()
    for idx in order:
        if idx < n_children:
            row, tok = divmod(idx, vocab)
            beams.append(state.beams[running[row]] + (tok,))
            logps.append(float(phi[row, tok]))
            finished.append(tok in eos or len(beams[-1]) >= params.max_tokens)
            if not finished[-1]:
                parents.append(row)
                tokens.append(tok)
        else:
            src = fin[idx - n_children]
            beams.append(state.beams[src])
            logps.append(state.logprobs[src])
            finished.append(True)
        ks.append(float(all_keys[idx]))
    new = StochasticBeamState(state.k, tuple(beams), tuple(logps), tuple(ks), tuple(finished),
                              state.step + 1, all(finished),
                              tuple(i for i, f in enumerate(finished) if not f))
    return new, BeamMove(tuple(parents), tuple(tokens))


__all__ = ["MAX_BEAMS", "BeamParams", "BeamState", "BeamMove", "Finished", "beam_step",
           "best_hypotheses", "diversity_penalty", "gumbel_from_uniform", "gumbel_top_k",
           "truncated_gumbel", "StochasticBeamState", "stochastic_beam_step"]
