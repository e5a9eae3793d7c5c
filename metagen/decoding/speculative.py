"""The lossless speculative-sampling accept/reject rule, as pure functions.

A proposer drafts ``K`` tokens ``d_1..d_K`` (with draft probabilities ``q_i``, or none for a
deterministic proposer such as prompt lookup); the target model scores the prefix plus the drafts
in one forward pass, giving ``K + 1`` next-token distributions ``p_0..p_K``. The rule (Leviathan
et al. 2023, "Fast Inference from Transformers via Speculative Decoding", Alg. 1; Chen et al. 2023,
"Accelerating LLM Decoding with Speculative Sampling", Alg. 2) accepts ``d_i`` with probability
``min(1, p_i(d_i) / q_i(d_i))``; at the first rejection it samples a replacement from the residual
``norm(max(0, p_i - q_i))`` and stops; when every draft is accepted it samples a bonus token from
``p_K``. Every emitted token is then distributed exactly as a token sampled from the target.

A deterministic proposer is the special case ``q_i = onehot(d_i)``: accept with probability
``p_i(d_i)``, residual ``p_i`` with ``d_i`` removed. Greedy decoding is the special case of one-hot
target distributions at the argmax, for which :func:`greedy_accept` is the direct form.

All randomness comes in as uniforms, so a caller with per-row counter-based seeds gets outputs that
do not depend on the batch they ran in. Nothing here mutates its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from metagen.errors import InvalidParameterError

PAD = -1  # fills ``tokens`` beyond ``num_emitted``


@dataclass(slots=True, frozen=True)
class AcceptOutcome:
    """Result of one verification round for a batch.

    ``tokens[b, :num_emitted[b]]`` are the tokens row ``b`` emits this round (the accepted drafts
    then one corrected or bonus token); the rest is ``PAD``. ``num_accepted[b]`` counts accepted
    drafts, so ``num_emitted == num_accepted + 1``.
    """

    tokens: torch.Tensor        # (B, K+1) long
    num_accepted: torch.Tensor  # (B,) long

    @property
    def num_emitted(self) -> torch.Tensor:
        return self.num_accepted + 1


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token ids drawn from (possibly unnormalised) ``probs`` (B, V) with uniforms ``u`` (B,).

    Inverse-CDF sampling: never returns a zero-probability token. Rows that sum to zero raise.
    """
    cdf = torch.cumsum(probs.to(torch.float64), dim=-1)  # (B, V)
    total = cdf[:, -1:]
    if bool((total <= 0).any()):
        raise ValueError("cannot sample from a distribution with zero total mass")
    target = u.to(torch.float64).unsqueeze(-1) * total  # (B, 1)
    idx = torch.searchsorted(cdf, target, right=True)
    return idx.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def _check_shapes(draft_tokens: torch.Tensor, target: torch.Tensor,
                  num_draft: torch.Tensor | None) -> tuple[int, int, torch.Tensor]:
    if draft_tokens.dim() != 2:
        raise InvalidParameterError("draft_tokens", tuple(draft_tokens.shape), "must be (B, K)")
    b, k = draft_tokens.shape
    if target.shape[0] != b or target.shape[1] != k + 1:
        raise InvalidParameterError("target", tuple(target.shape), f"must be ({b}, {k + 1}, ...)")
    if num_draft is None:
        return b, k, torch.full((b,), k, dtype=torch.long, device=draft_tokens.device)
    if num_draft.shape != (b,) or bool((num_draft < 0).any()) or bool((num_draft > k).any()):
        raise InvalidParameterError("num_draft", num_draft.tolist(), f"must be (B,) in [0, {k}]")
    return b, k, num_draft.to(torch.long)


def _emit(draft_tokens: torch.Tensor, n_acc: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    b, k = draft_tokens.shape
    pos = torch.arange(k + 1, device=draft_tokens.device).unsqueeze(0)  # (1, K+1)
    padded = torch.cat([draft_tokens, torch.full((b, 1), PAD, dtype=torch.long,
                                                 device=draft_tokens.device)], dim=1)
    tokens = torch.where(pos < n_acc.unsqueeze(1), padded, torch.full_like(padded, PAD))
    tokens.scatter_(1, n_acc.unsqueeze(1), last.unsqueeze(1))
    return tokens


def greedy_accept(draft_tokens: torch.Tensor, target_argmax: torch.Tensor,
                  num_draft: torch.Tensor | None = None) -> AcceptOutcome:
    """Greedy verification: accept drafts while they equal the target's argmax.

    ``draft_tokens`` (B, K), ``target_argmax`` (B, K+1): the target's argmax after the prefix and
    after each draft; ``num_draft`` (B,) how many drafts of each row are real (default all K).
    The emitted tokens are exactly what plain greedy decoding of the target emits.
    """
    b, k, nd = _check_shapes(draft_tokens, target_argmax, num_draft)
    pos = torch.arange(k, device=draft_tokens.device).unsqueeze(0)
    match = (draft_tokens == target_argmax[:, :k]) & (pos < nd.unsqueeze(1))  # (B, K)
    n_acc = torch.cumprod(match.to(torch.long), dim=1).sum(dim=1)  # (B,)
    last = target_argmax.gather(1, n_acc.unsqueeze(1)).squeeze(1)
    return AcceptOutcome(_emit(draft_tokens, n_acc, last), n_acc)


def speculative_accept(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None,
                       target_probs: torch.Tensor, accept_u: torch.Tensor,
                       sample_u: torch.Tensor,
                       num_draft: torch.Tensor | None = None) -> AcceptOutcome:
    """The speculative-sampling rule (Leviathan et al. 2023; Chen et al. 2023).

    ``draft_tokens`` (B, K); ``draft_probs`` (B, K, V) the proposer's distributions the drafts were
    sampled from, or ``None`` for a deterministic proposer (point masses); ``target_probs``
    (B, K+1, V) the target's processed sampling distributions (after temperature, top-p, ...);
    ``accept_u`` (B, K) and ``sample_u`` (B,) independent uniforms in [0, 1); ``num_draft`` (B,)
    the number of real drafts per row (default K). Emitted tokens are distributed exactly as
    sequential sampling from ``target_probs`` would give.
    """
    b, k, nd = _check_shapes(draft_tokens, target_probs, num_draft)
    if accept_u.shape != (b, k) or sample_u.shape != (b,):
        raise InvalidParameterError("accept_u", tuple(accept_u.shape), f"must be ({b}, {k})")
    p = target_probs.to(torch.float64)
    idx = draft_tokens.clamp(min=0).unsqueeze(-1)  # (B, K, 1)
    p_x = p[:, :k].gather(2, idx).squeeze(-1)  # (B, K)
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    else:
        if draft_probs.shape != (b, k, p.shape[-1]):
            raise InvalidParameterError("draft_probs", tuple(draft_probs.shape),
                                        f"must be ({b}, {k}, {p.shape[-1]})")
        q_x = draft_probs.to(torch.float64).gather(2, idx).squeeze(-1)
    pos = torch.arange(k, device=draft_tokens.device).unsqueeze(0)
    # accept iff u < p/q, written without division: u * q < p (q > 0 for a sampled draft)
    accept = (accept_u.to(torch.float64) * q_x < p_x) & (pos < nd.unsqueeze(1))  # (B, K)
    n_acc = torch.cumprod(accept.to(torch.long), dim=1).sum(dim=1)  # (B,)

    rows = torch.arange(b, device=draft_tokens.device)
    if k == 0:  # nothing to verify: one plain sample from the target
        last = sample_inverse_cdf(p[:, 0], sample_u)
        return AcceptOutcome(last.unsqueeze(1), n_acc)
    p_at = p[rows, n_acc]  # (B, V): the target distribution where the last token is drawn
    rejected = n_acc < nd  # (B,) rows whose draft at n_acc was rejected (else: bonus token)
    if draft_probs is None:
        residual = p_at.clone()
        rej_tok = draft_tokens.clamp(min=0)[rows, n_acc.clamp(max=k - 1)]  # (B,)
        residual[rows, rej_tok] = torch.where(rejected, 0.0, residual[rows, rej_tok])
    else:
        q_at = draft_probs.to(torch.float64)[rows, n_acc.clamp(max=k - 1)]  # (B, V)
        residual = torch.where(rejected.unsqueeze(1), (p_at - q_at).clamp_(min=0.0), p_at)
    # a residual with no mass only arises from rounding when p ~= q; fall back to p (exact case)
    empty = residual.sum(dim=-1) <= 0
    residual = torch.where(empty.unsqueeze(1), p_at, residual)
    last = sample_inverse_cdf(residual, sample_u)
    return AcceptOutcome(_emit(draft_tokens, n_acc, last), n_acc)
