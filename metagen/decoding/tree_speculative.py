"""Speculative verification of a caterpillar draft tree, as pure functions.

A round drafts, for one row, a *chain* ``c_1..c_k`` (``c_1`` the child of the root, the row's last
real token; ``c_{d+1}`` the child of ``c_d``) plus *leaves*: alternative tokens ``(parent, token)``
hanging off node ``parent`` (0 = root, ``p >= 1`` = ``c_p``), without children of their own. Leaves
come in ascending ``parent`` order, and among one parent in the order they were drafted. Nodes are
numbered 0 = root, ``1..k`` = chain, ``k + 1 + j`` = ``leaves[j]``; the target scores every node in
one pass, giving row ``i`` = its next-token distribution after node ``i``. At depth ``d`` (the
children of node ``d``) the *candidates* are, in order, ``c_{d+1}`` (if ``d < k``) then the leaves
whose parent is ``d``.

Greedy (:func:`tree_accept_greedy`): walk from the root accepting the candidate equal to the
target's argmax; a chain token moves one depth down, a leaf ends the walk with its own argmax as
bonus token; when no candidate matches, the argmax is emitted and the walk ends. The emitted tokens
are exactly those of plain greedy decoding.

Sampling (:func:`tree_accept`): recursive rejection sampling without replacement (SpecInfer, Miao
et al. 2024, "SpecInfer: Accelerating Generative LLM Serving with Tree-based Speculative
Inference and Verification"; Jeon et al. 2024, "Recursive Speculative Decoding"). At depth ``d``,
start from ``r = p_d`` and ``qq = q_d`` (the draft distribution ``c_{d+1}`` was drawn from; the
leaves of depth ``d`` were drawn from it after ``c_{d+1}``, without replacement, see
:func:`draw_alternatives`). For each candidate ``x`` in order: accept with probability
``min(1, r(x) / qq(x))``; on rejection set ``r <- norm(max(r - qq, 0))`` and remove ``x`` from
``qq`` (renormalised: the next candidate was drawn from that). An accepted chain token moves on to
depth ``d + 1``; an accepted leaf ends the walk with a bonus token sampled from its own row; when
every candidate is rejected (or there is none) a token is sampled from ``r`` and the walk ends. A
deterministic proposer (``draft_q=None``) is the case of point masses ``qq = onehot(x)``: accept
with probability ``r(x)``, residual ``r`` with ``x`` removed.

Exactness. Claim: at a depth with state ``(r, qq)`` whose remaining candidates are drawn from
``qq`` without replacement, the token the depth outputs (accepted or sampled) is distributed as
``r``. Induction on the number of candidates left: with none, we sample from ``r``. Otherwise
``x ~ qq`` and ``P(accept, x = y) = qq(y) min(1, r(y)/qq(y)) = min(qq(y), r(y))``, so
``P(reject) = sum(max(r - qq, 0)) = Z``. Given the rejection and ``x``, the rest are drawn from
``qq`` without ``x``, so by induction the output is distributed as ``r' = max(r - qq, 0) / Z``,
which does not depend on ``x``. Total: ``min(qq, r) + Z r' = r``. Point masses are the same
computation with ``qq = onehot(x)``. At depth ``d`` the output is thus distributed as ``p_d``; the
deeper candidates were drawn given it alone, so the walk continues (a chain token: the next depth
uses ``p_{d+1}``) or ends (a leaf: its bonus from its own target row) exactly as sequential
sampling from the target does.

Numerical edge cases (none arises in exact arithmetic): a residual with no mass (rounding when
``r ~= qq``, where the rejection had probability 0) keeps ``r`` unchanged, as
:func:`~metagen.decoding.speculative.speculative_accept` falls back to ``p``; a candidate to which
``qq`` gives no mass (it cannot have been drawn from ``qq``) is skipped, leaving ``r`` and ``qq``
as they are; when ``qq`` has no mass left, no further candidate can have been drawn, and the
depth's token is sampled from ``r``. Skipping candidates keeps the claim above true.

All randomness comes in as uniforms; nothing here mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from metagen.decoding.speculative import sample_inverse_cdf
from metagen.errors import InvalidParameterError


@dataclass(slots=True, frozen=True)
class TreeOutcome:
    """Result of verifying one row's draft tree.

    ``tokens``: the emitted tokens (the accepted candidates, then the corrected or bonus token);
    ``nodes``: the accepted node indices in walk order, so ``len(tokens) == len(nodes) + 1``.
    """

    tokens: list[int]
    nodes: list[int]

    @property
    def num_accepted(self) -> int:
        return len(self.nodes)


def _by_depth(chain: Sequence[int], leaves: Sequence[tuple[int, int]]
              ) -> list[list[tuple[int, int]]]:
    """Validate the tree; ``out[d]`` = the candidates ``(node, token)`` at depth ``d``, in order."""
    k = len(chain)
    out: list[list[tuple[int, int]]] = [[(d + 1, int(chain[d]))] if d < k else []
                                        for d in range(k + 1)]
    prev = 0
    for j, (parent, token) in enumerate(leaves):
        if not 0 <= parent <= k:
            raise InvalidParameterError("leaves", list(leaves),
                                        f"leaf {j}: parent must be in 0..{k}")
        if parent < prev:
            raise InvalidParameterError("leaves", list(leaves), "parents must be ascending")
        prev = parent
        out[parent].append((k + 1 + j, int(token)))
    return out


def _floats(u: Sequence[float] | torch.Tensor) -> list[float]:
    return [float(x) for x in (u.tolist() if isinstance(u, torch.Tensor) else u)]


def tree_accept_greedy(chain: Sequence[int], leaves: Sequence[tuple[int, int]],
                       argmax: Sequence[int] | torch.Tensor) -> TreeOutcome:
    """Greedy verification of a caterpillar tree.

    ``argmax[i]`` is the target's processed argmax after node ``i`` (``1 + k + len(leaves)``
    entries). Emits exactly what plain greedy decoding of the target emits.
    """
    depths = _by_depth(chain, leaves)
    k, n = len(chain), 1 + len(chain) + len(leaves)
    best = [int(x) for x in (argmax.tolist() if isinstance(argmax, torch.Tensor) else argmax)]
    if len(best) != n:
        raise InvalidParameterError("argmax", len(best), f"must have 1 + k + len(leaves) = {n}")
    tokens: list[int] = []
    nodes: list[int] = []
    d = 0
    while True:
        want = best[d]
        hit = next(((node, tok) for node, tok in depths[d] if tok == want), None)
        if hit is None:
            return TreeOutcome(tokens + [want], nodes)
        nodes.append(hit[0])
        tokens.append(want)
        if hit[0] > k:  # a leaf: its own argmax is the bonus token
            return TreeOutcome(tokens + [best[hit[0]]], nodes)
        d += 1


def _residual(r: torch.Tensor, qq: torch.Tensor) -> torch.Tensor:
    """``norm(max(r - qq, 0))``; ``r`` itself when that has no mass (rounding when r ~= qq)."""
    res = (r - qq).clamp(min=0.0)
    mass = float(res.sum())
    return r if mass <= 0 else res / mass


def _verify_depth(cands: list[tuple[int, int]], r: torch.Tensor, qq: torch.Tensor | None,
                  u: list[float]) -> tuple[tuple[int, int] | None, torch.Tensor]:
    """Test one depth's candidates ``(node, token)`` in order against ``r`` (normalised).

    Returns the accepted candidate, or None and the distribution the depth's token is then
    sampled from. ``qq``: the (normalised) distribution the first candidate was drawn from, or
    None for point masses.
    """
    for node, tok in cands:
        q_x = 1.0 if qq is None else float(qq[tok])
        if q_x <= 0:  # cannot have been drawn from qq: skipped
            continue
        if u[node] * q_x < float(r[tok]):  # accept with probability min(1, r/q)
            return (node, tok), r
        if qq is None:  # point mass at tok: r with tok removed
            point = torch.zeros_like(r)
            point[tok] = 1.0
            r = _residual(r, point)
            continue
        r = _residual(r, qq)
        qq = qq.clone()
        qq[tok] = 0.0  # the next candidate was drawn without tok
        mass = float(qq.sum())
        if mass <= 0:  # nothing left to draw: no further candidate can have been drawn
            break
        qq = qq / mass
    return None, r


def tree_accept(chain: Sequence[int], leaves: Sequence[tuple[int, int]], target: torch.Tensor,
                draft_q: torch.Tensor | None, accept_u: Sequence[float] | torch.Tensor,
                sample_u: float | torch.Tensor) -> TreeOutcome:
    """Distribution-exact sampling verification of a caterpillar tree.

    ``target`` (N, V), N = ``1 + k + len(leaves)``: the target's processed sampling distribution
    after each node. ``draft_q`` (k_q, V): row ``d`` the draft distribution the candidates of
    depth ``d`` were drawn from (``c_{d+1}`` first, then its leaves without replacement); rows are
    needed for every depth that has candidates. ``None`` for a deterministic proposer (point
    masses). ``accept_u``: at least N uniforms in [0, 1), node ``i`` tested with ``accept_u[i]``
    (index 0 unused); ``sample_u``: the uniform of the one final draw. Rows are renormalised; a
    row used with no mass raises. The emitted tokens are distributed exactly as sequential
    sampling from ``target`` would give.
    """
    depths = _by_depth(chain, leaves)
    k, n = len(chain), 1 + len(chain) + len(leaves)
    if target.dim() != 2 or target.shape[0] != n:
        raise InvalidParameterError("target", tuple(target.shape), f"must be ({n}, V)")
    v = target.shape[1]
    if any(not 0 <= int(t) < v for t in chain):
        raise InvalidParameterError("chain", list(chain), f"tokens must be in 0..{v - 1}")
    if any(not 0 <= int(t) < v for _, t in leaves):
        raise InvalidParameterError("leaves", list(leaves), f"tokens must be in 0..{v - 1}")
    need = max((d + 1 for d in range(k + 1) if depths[d]), default=0)
    if draft_q is not None and (draft_q.dim() != 2 or draft_q.shape[0] < need
                                or draft_q.shape[1] != v):
        raise InvalidParameterError("draft_q", tuple(draft_q.shape), f"must be (>= {need}, {v})")
    u = _floats(accept_u)
    if len(u) < n:
        raise InvalidParameterError("accept_u", len(u), f"must have at least {n} uniforms")
    u_last = torch.tensor([float(sample_u)], dtype=torch.float64)
    p = target.to(torch.float64)

    def row(dist: torch.Tensor, name: str, i: int) -> torch.Tensor:
        mass = float(dist.sum())
        if not mass > 0:
            raise InvalidParameterError(name, i, "row has no probability mass")
        return dist / mass

    def draw(dist: torch.Tensor) -> int:
        return int(sample_inverse_cdf(dist.unsqueeze(0), u_last)[0])

    tokens: list[int] = []
    nodes: list[int] = []
    for d in range(k + 1):
        qq = None if draft_q is None or not depths[d] else row(
            draft_q[d].to(torch.float64), "draft_q", d)
        hit, r = _verify_depth(depths[d], row(p[d], "target", d), qq, u)
        if hit is None:
            return TreeOutcome(tokens + [draw(r)], nodes)
        nodes.append(hit[0])
        tokens.append(hit[1])
        if hit[0] > k:  # a leaf: the bonus token comes from its own row
            return TreeOutcome(tokens + [draw(row(p[hit[0]], "target", hit[0]))], nodes)
    raise AssertionError("unreachable: depth k has no chain candidate, so the walk ends there")


def draw_alternatives(q: torch.Tensor, first: int | None, m: int,
                      uniforms: Sequence[float] | torch.Tensor) -> list[int]:
    """Draft side: up to ``m`` tokens from ``q`` (V,) without replacement, after ``first``.

    Draw ``j`` is from ``q`` with ``first`` and the earlier draws removed (renormalised), by
    inverse CDF with ``uniforms[j]``; stops early when no mass is left. These are the leaves of one
    depth, in the order :func:`tree_accept` expects.
    """
    if q.dim() != 1:
        raise InvalidParameterError("q", tuple(q.shape), "must be (V,)")
    if m < 0:
        raise InvalidParameterError("m", m, "must be >= 0")
    u = _floats(uniforms)
    if len(u) < m:
        raise InvalidParameterError("uniforms", len(u), f"must have at least m = {m}")
    if first is not None and not 0 <= first < q.shape[0]:
        raise InvalidParameterError("first", first, f"must be in 0..{q.shape[0] - 1}")
    w = q.to(torch.float64).unsqueeze(0).clone()  # (1, V)
    if first is not None:
        w[0, first] = 0.0
    ut = torch.tensor(u[:m], dtype=torch.float64)
    out: list[int] = []
    for j in range(m):
        if not float(w.sum()) > 0:
            break
        tok = int(sample_inverse_cdf(w, ut[j:j + 1])[0])
        out.append(tok)
        w[0, tok] = 0.0
    return out
