"""Caterpillar-tree speculative verification: golden values, greedy equivalence, exact law.

Statistical tests use a chi-square goodness-of-fit test at significance 1e-6 (critical value from
the Wilson-Hilferty approximation): under a correct rule a fresh seed fails with probability about
1e-6; the seeds are fixed, so the tests are deterministic. The power test shows that the same test
rejects a rule whose residual update is skipped.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable

import pytest
import torch

from metagen.decoding import tree_speculative
from metagen.decoding.tree_speculative import (
    TreeOutcome, draw_alternatives, tree_accept, tree_accept_greedy)
from metagen.errors import InvalidParameterError

Z_1E6 = 4.7534  # standard normal upper quantile at 1e-6

Prefix = tuple[int, ...]
Leaves = list[tuple[int, int]]


def chi2_critical(df: int, z: float = Z_1E6) -> float:
    """Wilson-Hilferty approximation of the chi-square upper quantile."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom; cells expecting < 5 are pooled into one (the
    chi-square approximation needs expected counts of about 5 or more)."""
    n = counts.sum().item()
    expected = probs.to(torch.float64) * n
    assert counts[expected <= 0].sum() == 0, "sampled an outcome of probability zero"
    big = expected >= 5
    rare = (expected > 0) & ~big
    obs = torch.cat([counts[big], counts[rare].sum().view(1)])
    exp = torch.cat([expected[big], expected[rare].sum().view(1)])
    if not bool(rare.any()):
        obs, exp = obs[:-1], exp[:-1]
    stat = ((obs - exp) ** 2 / exp).sum().item()
    return stat, obs.numel() - 1


def _random_dists(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Random distributions over the last dim: softmax(1.5 z), z standard normal (written out:
    torch.softmax enters a thread-parallel region even for tiny inputs, slow on a busy machine)."""
    e = torch.exp(1.5 * torch.randn(shape, generator=gen, dtype=torch.float64))
    return e / e.sum(-1, keepdim=True)


def _node_prefixes(prefix: Prefix, chain: list[int], leaves: Leaves) -> list[Prefix]:
    """The token prefix after each node (root, chain, leaves), in node order."""
    return ([prefix + tuple(chain[:i]) for i in range(len(chain) + 1)]
            + [prefix + tuple(chain[:par]) + (tok,) for par, tok in leaves])


def _check_nodes(out: TreeOutcome, chain: list[int], leaves: Leaves) -> None:
    node_tok = [-1] + chain + [tok for _, tok in leaves]
    assert len(out.tokens) == len(out.nodes) + 1
    assert [node_tok[i] for i in out.nodes] == out.tokens[:-1]


# ------------------------------------------------------------------------------------- greedy

@pytest.mark.parametrize(("chain", "leaves", "argmax", "tokens", "nodes"), [
    ([5, 6], [(0, 7), (1, 8)], [5, 6, 9, 1, 2], [5, 6, 9], [1, 2]),  # chain accepted + bonus
    ([5, 6], [(0, 7), (1, 8)], [5, 8, 0, 0, 3], [5, 8, 3], [1, 4]),  # leaf at depth 1 + its bonus
    ([5, 6], [(0, 7), (1, 8)], [4, 6, 9, 1, 2], [4], []),            # nothing matches
    ([5, 6], [(2, 7)], [5, 6, 7, 9], [5, 6, 7, 9], [1, 2, 3]),       # leaf at depth k
    ([5, 6], [(2, 7)], [5, 6, 3, 9], [5, 6, 3], [1, 2]),             # depth-k leaf rejected
    ([5], [(0, 7), (0, 8)], [8, 1, 2, 4], [8, 4], [3]),              # second root leaf
    ([], [(0, 7)], [7, 2], [7, 2], [1]),                             # k = 0
    ([], [], [3], [3], []),                                          # empty tree
])
def test_greedy_golden(chain: list[int], leaves: Leaves, argmax: list[int], tokens: list[int],
                       nodes: list[int]) -> None:
    out = tree_accept_greedy(chain, leaves, torch.tensor(argmax))
    assert (out.tokens, out.nodes) == (tokens, nodes)
    assert out.num_accepted == len(nodes)


def _hashed_argmax(prefix: Prefix, v: int) -> int:
    """A deterministic "greedy target": argmax of a random vector seeded by the prefix."""
    code = sum((t + 1) * (v + 1) ** i for i, t in enumerate(prefix))
    gen = torch.Generator().manual_seed(code % (2 ** 63 - 1))
    return int(torch.randn(v, generator=gen).argmax())


def test_greedy_rounds_equal_plain_greedy() -> None:
    rng = random.Random(0)
    v, length = 5, 25
    for _ in range(40):
        plain: list[int] = []
        for _ in range(length):
            plain.append(_hashed_argmax(tuple(plain), v))
        seq: list[int] = []
        while len(seq) < length:
            k = rng.randint(0, 3)
            chain: list[int] = []
            for _ in range(k):  # often right, sometimes wrong
                good = _hashed_argmax(tuple(seq + chain), v)
                chain.append(good if rng.random() < 0.6 else rng.randrange(v))
            leaves = sorted((rng.randint(0, k), rng.randrange(v)) for _ in range(rng.randint(0, 4)))
            argmax = [_hashed_argmax(pre, v) for pre in _node_prefixes(tuple(seq), chain, leaves)]
            out = tree_accept_greedy(chain, leaves, argmax)
            _check_nodes(out, chain, leaves)
            seq += out.tokens
        assert seq[:length] == plain


def test_one_hot_target_reduces_to_greedy() -> None:
    rng = random.Random(1)
    gen = torch.Generator().manual_seed(1)
    v = 6
    for _ in range(300):
        k = rng.randint(0, 3)
        chain = [rng.randrange(v) for _ in range(k)]
        leaves = sorted((rng.randint(0, k), rng.randrange(v)) for _ in range(rng.randint(0, 4)))
        n = 1 + k + len(leaves)
        children = [chain[i:i + 1] + [t for par, t in leaves if par == i] for i in range(n)]
        # make matches likely: a node's argmax is often one of its candidates
        argmax = [rng.choice(c) if c and rng.random() < 0.7 else rng.randrange(v)
                  for c in children]
        onehot = torch.nn.functional.one_hot(torch.tensor(argmax), v).double()
        q = _random_dists((k + 1, v), gen)
        ref = tree_accept_greedy(chain, leaves, argmax)
        for draft_q in (None, q):
            out = tree_accept(chain, leaves, onehot, draft_q, torch.rand(n, generator=gen),
                              float(torch.rand(1, generator=gen)))
            assert (out.tokens, out.nodes) == (ref.tokens, ref.nodes)


# ----------------------------------------------------------------------------- sampling: golden

def test_identical_draft_accepts_whole_chain() -> None:
    gen = torch.Generator().manual_seed(2)
    k, v = 3, 5
    target = _random_dists((k + 2, v), gen)
    for _ in range(50):
        chain = [int(torch.multinomial(target[d], 1, generator=gen)) for d in range(k)]
        out = tree_accept(chain, [(0, 0)], target, target[:k], torch.rand(k + 2, generator=gen),
                          0.5)
        assert out.nodes == [1, 2, 3]


def test_deterministic_residual_golden() -> None:
    """k = 0, two point-mass leaves: the second is tested against p with the first removed."""
    target = torch.tensor([[0.5, 0.3, 0.2], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]],
                          dtype=torch.float64)
    # leaf 0 (token 0): 0.6 >= 0.5 rejects; r = [0, 0.6, 0.4]; leaf 1 (token 1): 0.5 < 0.6 accepts
    out = tree_accept([], [(0, 0), (0, 1)], target, None, [0.0, 0.6, 0.5], 0.3)
    assert (out.tokens, out.nodes) == ([1, 1], [2])  # bonus from the leaf's own row (node 2)
    # 0.7 >= 0.6 rejects too: sample from r = [0, 0, 1]
    out = tree_accept([], [(0, 0), (0, 1)], target, None, [0.0, 0.6, 0.7], 0.3)
    assert (out.tokens, out.nodes) == ([2], [])


def test_numerical_edge_cases() -> None:
    """Cases exact arithmetic never reaches keep the rule well defined (module docstring)."""
    p = torch.tensor([[0.2, 0.3, 0.5]] + [[0.0, 0.0, 1.0]] * 3, dtype=torch.float64)
    q = torch.tensor([[0.5, 0.0, 0.5]], dtype=torch.float64)
    # chain 0 rejected (0.9 * 0.5 >= 0.2): r = [0, 1, 0], qq = [0, 0, 1]. Leaf 1 has qq = 0, so
    # it is skipped although u = 0 (it cannot have been drawn); leaf 2 is rejected (r(2) = 0),
    # leaving qq with no mass; the token comes from r.
    out = tree_accept([0], [(0, 1), (0, 2)], p, q, [0.0, 0.9, 0.0, 0.5], 0.5)
    assert (out.tokens, out.nodes) == ([1], [])
    # a residual with no mass (r == qq: rejection had probability 0) keeps r
    r = torch.tensor([0.25, 0.75], dtype=torch.float64)
    assert torch.equal(tree_speculative._residual(r, r.clone()), r)


def test_draw_alternatives_golden() -> None:
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    # without 3: [.1, .2, .3] -> u=.6 picks 2; [.1, .2] -> u=.5 picks 1; [.1] -> 0; then no mass
    assert draw_alternatives(q, 3, 5, [0.6, 0.5, 0.99, 0.1, 0.1]) == [2, 1, 0]
    assert draw_alternatives(q, None, 2, torch.tensor([0.95, 0.0])) == [3, 0]
    assert draw_alternatives(q, 0, 0, []) == []


# ------------------------------------------------------------------------- sampling: exactness

# (k, leaf parents) of the draft trees, one drawn per round: leaves at the root, mid-chain and at
# depth k (k = 1); chain only; leaves only. Deeper nodes would not change the first two tokens.
SHAPES = [(2, [0, 0, 1]), (1, [0, 1, 1]), (2, []), (0, [0, 0]), (2, [1])]


class _Model:
    """A random next-token distribution per prefix, seeded by the prefix (some tokens zeroed)."""

    def __init__(self, v: int, salt: int) -> None:
        self.v, self.salt = v, salt
        self.cache: dict[Prefix, tuple[torch.Tensor, list[float], list[int]]] = {}

    def _entry(self, prefix: Prefix) -> tuple[torch.Tensor, list[float], list[int]]:
        if prefix not in self.cache:
            code = sum((t + 1) * (self.v + 1) ** i for i, t in enumerate(prefix))
            gen = torch.Generator().manual_seed(self.salt * 1_000_003 + code)
            dist = _random_dists((self.v,), gen)
            if float(torch.rand(1, generator=gen)) < 0.3:  # supports differ between p and q
                dist[int(torch.randint(self.v, (1,), generator=gen))] = 0.0
            dist = dist / dist.sum()
            order = [int(t) for t in torch.argsort(dist, descending=True, stable=True)]
            self.cache[prefix] = (dist, list(itertools.accumulate(dist.tolist())), order)
        return self.cache[prefix]

    def __call__(self, prefix: Prefix) -> torch.Tensor:
        return self._entry(prefix)[0]

    def sample(self, prefix: Prefix, u: float) -> int:
        """Inverse-CDF draw (never a zero-probability token)."""
        cdf = self._entry(prefix)[1]
        return min(bisect.bisect_right(cdf, u * cdf[-1]), self.v - 1)

    def top(self, prefix: Prefix) -> list[int]:
        return self._entry(prefix)[2]


def _draft_round(prefix: Prefix, k: int, parents: list[int], q: _Model, deterministic: bool,
                 rng: random.Random) -> tuple[list[int], Leaves, torch.Tensor | None]:
    """One draft tree: the chain drawn from q along itself, each depth's leaves after it."""
    chain: list[int] = []
    leaves: Leaves = []
    for d in range(k + 1):
        ctx, m = prefix + tuple(chain), parents.count(d)
        if deterministic:  # the top tokens of q: the chain token, then the leaves
            first = q.top(ctx)[0] if d < k else None
            leaves += [(d, t) for t in [t for t in q.top(ctx) if t != first][:m]]
        else:
            first = q.sample(ctx, rng.random()) if d < k else None
            if m:
                alts = draw_alternatives(q(ctx), first, m, [rng.random() for _ in range(m)])
                leaves += [(d, t) for t in alts]
        if first is not None:
            chain.append(first)
    if deterministic:
        return chain, leaves, None
    return chain, leaves, torch.stack([q(prefix + tuple(chain[:d])) for d in range(k + 1)])


def _sample_sequences(p: _Model, q: _Model, length: int, n: int, deterministic: bool,
                      seed: int) -> torch.Tensor:
    """``n`` independent runs of the tree loop, each until ``length`` tokens; (n, length)."""
    rng = random.Random(seed)
    out = torch.empty(n, length, dtype=torch.long)
    for i in range(n):
        seq: Prefix = ()
        while len(seq) < length:  # a round that emits fewer starts the next from its output
            k, parents = SHAPES[rng.randrange(len(SHAPES))]
            chain, leaves, draft_q = _draft_round(seq, k, parents, q, deterministic, rng)
            target = torch.stack([p(pre) for pre in _node_prefixes(seq, chain, leaves)])
            res = tree_accept(chain, leaves, target, draft_q,
                              [rng.random() for _ in range(target.shape[0])], rng.random())
            seq += tuple(res.tokens)
        out[i] = torch.tensor(seq[:length])
    return out


def _chi2_vs_target(p: _Model, seqs: torch.Tensor) -> tuple[float, float]:
    """Chi-square of the joint law of the sequences' tokens against sequential sampling of p."""
    v, length = p.v, seqs.shape[1]
    codes = (seqs * torch.tensor([v ** (length - 1 - j) for j in range(length)])).sum(1)
    counts = torch.bincount(codes, minlength=v ** length).double()
    exact = torch.zeros(v ** length, dtype=torch.float64)
    for code in range(v ** length):
        toks = [code // v ** (length - 1 - j) % v for j in range(length)]
        exact[code] = math.prod(float(p(tuple(toks[:j]))[toks[j]]) for j in range(length))
    stat, df = chi2_stat(counts, exact)
    return stat, chi2_critical(df)


@pytest.mark.parametrize("deterministic", [False, True])
def test_sequences_distributed_as_target(deterministic: bool) -> None:
    """Rounds on random trees until 2 tokens: their joint law is the target's (16 cells).

    The trees of SHAPES exercise leaves at the root, mid-chain and at depth k, the bonus tokens of
    leaves and of a whole accepted chain, and rounds that emit one token (then another round).
    """
    p, q = _Model(4, salt=1), _Model(4, salt=2)
    seqs = _sample_sequences(p, q, length=2, n=8_000, deterministic=deterministic, seed=3)
    stat, crit = _chi2_vs_target(p, seqs)
    assert stat < crit, (stat, crit)  # crit: the chi-square quantile at significance 1e-6


def test_chi_square_catches_skipped_residual(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power: the same test rejects the rule with ``r`` left at ``p_d`` after a rejection.

    With half the samples of the test above, the statistic is still several times the critical
    value (about 200 against 52 here), so the rejection does not hinge on the seed.
    """
    def no_residual(r: torch.Tensor, qq: torch.Tensor) -> torch.Tensor:
        return r

    monkeypatch.setattr(tree_speculative, "_residual", no_residual)
    p, q = _Model(4, salt=1), _Model(4, salt=2)
    seqs = _sample_sequences(p, q, length=2, n=4_000, deterministic=False, seed=3)
    stat, crit = _chi2_vs_target(p, seqs)
    assert stat > crit, (stat, crit)


# --------------------------------------------------------------------------------- validation

def _param(fn: Callable[[], object]) -> str:
    with pytest.raises(InvalidParameterError) as info:
        fn()
    return info.value.param


def test_errors_name_the_parameter() -> None:
    t = torch.full((4, 3), 1 / 3, dtype=torch.float64)
    u = [0.5] * 4
    assert _param(lambda: tree_accept_greedy([1], [(2, 0)], [0, 0, 0])) == "leaves"
    assert _param(lambda: tree_accept_greedy([1], [(1, 0), (0, 2)], [0] * 4)) == "leaves"
    assert _param(lambda: tree_accept_greedy([1], [(0, 0)], [0, 0])) == "argmax"
    assert _param(lambda: tree_accept([1], [(0, 0)], t, None, u, 0.5)) == "target"
    assert _param(lambda: tree_accept([1], [(0, 0), (1, 2)], t, None, u[:3], 0.5)) == "accept_u"
    assert _param(lambda: tree_accept([1], [(0, 0), (1, 2)], t, t[:1], u, 0.5)) == "draft_q"
    assert _param(lambda: tree_accept([1], [(0, 0), (1, 5)], t, None, u, 0.5)) == "leaves"
    assert _param(lambda: tree_accept([7], [(0, 0), (1, 2)], t, None, u, 0.5)) == "chain"
    assert _param(lambda: tree_accept([1], [(0, 0), (1, 2)], t * 0, None, u, 0.5)) == "target"
    assert _param(lambda: draw_alternatives(t[0], 0, 2, [0.5])) == "uniforms"
    assert _param(lambda: draw_alternatives(t, 0, 1, [0.5])) == "q"
    # draft_q needs a row for depth k only when depth k has leaves
    assert tree_accept([1], [(0, 0)], t[:3], t[:1], u, 0.5).tokens
