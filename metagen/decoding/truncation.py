"""Temperature and the truncation samplers over ``(B, V)`` logits: pure, batched, per-row.

Every function takes per-row parameters as ``(B,)`` tensors, returns new logits with removed
tokens at ``-inf`` and keeps at least the most likely token of each row (transformers'
``min_tokens_to_keep=1``). A row whose parameter has the documented "off" value is returned
unchanged, bit for bit, so rows with different settings can share one call.

- top-k (Fan et al. 2018): keep the k largest logits (ties with the k-th are kept). Off: k <= 0
  or k >= V.
- top-p / nucleus (Holtzman et al. 2020): keep the smallest set of most likely tokens whose mass
  reaches p. Off: p >= 1.
- min-p (Nguyen et al. 2024): drop tokens with probability below ``min_p * max_prob``. Off: 0.
- locally typical (Meister et al. 2023): keep the tokens whose surprise is closest to the entropy
  until their mass reaches ``typical_p``. Off: >= 1.
- epsilon and eta sampling (Hewitt et al. 2022): drop tokens with probability below epsilon,
  resp. below ``min(eta, sqrt(eta) * exp(-entropy))``. Off: 0.
- Mirostat v2 (Basu et al. 2021): drop tokens whose surprise ``-ln p`` exceeds the running
  threshold ``mu``. Off: ``mu = +inf``.

The formulas follow transformers' warpers so that the kept sets and values agree with them.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``logits / temperature``; ``temperature`` ``(B,)`` > 0 (1 leaves a row unchanged)."""
    return logits / temperature.to(logits.dtype)[:, None]


def _not_max(logits: torch.Tensor) -> torch.Tensor:
    """``(B, V)`` True where a token is below its row's maximum (those may be removed)."""
    return logits < logits.amax(dim=-1, keepdim=True)


def top_k_filter(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """``top_k`` ``(B,)`` int; rows with k <= 0 or k >= V are unchanged."""
    vocab = logits.shape[-1]
    k = top_k.to(device=logits.device, dtype=torch.int64)
    on = (k > 0) & (k < vocab)  # (B,)
    if not bool(on.any()):
        return logits
    k_max = int(k[on].max())
    top_vals = torch.topk(logits, k_max, dim=-1).values  # (B, k_max)
    idx = (k.clamp(1, k_max) - 1)[:, None]
    thresh = top_vals.gather(1, idx)  # (B, 1): the k-th largest value
    thresh = torch.where(on[:, None], thresh, torch.full_like(thresh, NEG_INF))
    return logits.masked_fill(logits < thresh, NEG_INF)


TOP_P_PREFIX = 256  # top-p first looks for its boundary among this many most likely tokens


def top_p_filter(logits: torch.Tensor, top_p: torch.Tensor, prefix: int = TOP_P_PREFIX
                 ) -> torch.Tensor:
    """``top_p`` ``(B,)`` in (0, 1]; rows with p >= 1 are unchanged.

    A token is removed when the tokens more likely than it already hold mass >= p
    (transformers' rule: its ascending cumulative mass <= 1 - p). Rows whose ``prefix`` most
    likely tokens hold mass >= p sort only those (``torch.topk``); the other rows sort the whole
    vocabulary, as transformers. The two agree except for a token whose cumulative mass equals
    p to float rounding.
    """
    p = top_p.to(device=logits.device, dtype=logits.dtype)
    on = p < 1.0
    if not bool(on.any()):
        return logits
    if prefix >= logits.shape[-1]:
        return _top_p_sorted(logits, p, on)
    vals, idx = torch.topk(logits, prefix, dim=-1)  # (B, prefix), descending
    probs = torch.exp(vals - torch.logsumexp(logits, dim=-1, keepdim=True))
    cum = probs.cumsum(dim=-1)
    keep_sorted = (cum - probs) < p[:, None]  # mass strictly before the token < p
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, idx, keep_sorted)
    out = logits.masked_fill(~keep & on[:, None], NEG_INF)
    wide = on & (cum[:, -1] < p)  # boundary beyond the prefix: sort the whole row
    if bool(wide.any()):
        rows = wide.nonzero().flatten()
        out[rows] = _top_p_sorted(logits[rows], p[rows], on[rows])
    return out


def _top_p_sorted(logits: torch.Tensor, p: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=False)  # ascending
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)  # (B, V)
    remove_sorted = cum <= (1.0 - p)[:, None]
    remove_sorted[:, -1] = False  # the most likely token stays
    remove_sorted &= on[:, None]
    remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def min_p_filter(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """``min_p`` ``(B,)`` in [0, 1]; rows with 0 are unchanged."""
    m = min_p.to(device=logits.device, dtype=logits.dtype)
    if not bool((m > 0).any()):
        return logits
    probs = logits.softmax(dim=-1)
    remove = probs < m[:, None] * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(remove & _not_max(logits), NEG_INF)


def typical_filter(logits: torch.Tensor, typical_p: torch.Tensor) -> torch.Tensor:
    """``typical_p`` ``(B,)`` in (0, 1]; rows with mass >= 1 are unchanged."""
    mass = typical_p.to(device=logits.device, dtype=logits.dtype)
    on = mass < 1.0
    if not bool(on.any()):
        return logits
    logp = torch.log_softmax(logits, dim=-1)
    ent = -(logp * logp.exp()).nansum(dim=-1, keepdim=True)  # (B, 1) entropy
    shifted = (-logp - ent).abs()  # |surprise - entropy|
    sorted_shift, sorted_idx = torch.sort(shifted, dim=-1, descending=False)
    cum = logits.gather(-1, sorted_idx).softmax(dim=-1).cumsum(dim=-1)
    last = (cum < mass[:, None]).sum(dim=-1).clamp(max=logits.shape[-1] - 1)  # (B,)
    remove_sorted = sorted_shift > sorted_shift.gather(1, last[:, None])
    remove_sorted[:, 0] = False
    remove_sorted &= on[:, None]
    remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def epsilon_filter(logits: torch.Tensor, epsilon: torch.Tensor) -> torch.Tensor:
    """``epsilon`` ``(B,)`` in [0, 1); rows with 0 are unchanged."""
    eps = epsilon.to(device=logits.device, dtype=logits.dtype)
    if not bool((eps > 0).any()):
        return logits
    remove = logits.softmax(dim=-1) < eps[:, None]
    return logits.masked_fill(remove & _not_max(logits), NEG_INF)


def entropy_rows(logits: torch.Tensor) -> torch.Tensor:
    """``(B,)`` Shannon entropy (nats) of ``softmax(logits)``; ``-inf`` entries contribute 0."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp * logp.exp()).nansum(dim=-1)


def eta_filter(logits: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """``eta`` ``(B,)`` in [0, 1); rows with 0 are unchanged."""
    e = eta.to(device=logits.device, dtype=logits.dtype)
    if not bool((e > 0).any()):
        return logits
    cutoff = torch.minimum(e, e.sqrt() * torch.exp(-entropy_rows(logits)))  # (B,)
    remove = logits.softmax(dim=-1) < cutoff[:, None]
    return logits.masked_fill(remove & _not_max(logits), NEG_INF)


def mirostat_filter(logits: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Mirostat v2 truncation: drop tokens with surprise ``-ln p > mu`` (``mu`` ``(B,)``,
    ``+inf`` leaves a row unchanged); the most likely token always stays."""
    m = mu.to(device=logits.device, dtype=logits.dtype)
    if not bool(torch.isfinite(m).any()):
        return logits
    surprise = -torch.log_softmax(logits, dim=-1)
    return logits.masked_fill((surprise > m[:, None]) & _not_max(logits), NEG_INF)


def mirostat_update(mu: float, tau: float, eta: float, surprise: float) -> float:
    """Mirostat v2's feedback step: ``mu - eta * (surprise - tau)``, where ``surprise`` is
    ``-ln p`` of the sampled token under the truncated, renormalised distribution (as
    llama.cpp; nats here, since ``mirostat_tau`` is in nats)."""
    return mu - eta * (surprise - tau)
