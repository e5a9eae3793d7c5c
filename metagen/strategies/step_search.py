"""The machinery every step-level search shares: batched expansion, batched scoring, budgets,
usage accounting and the final :class:`~metagen.types.Result` per prompt.

Contracts:

- :meth:`StepSearch.expand` makes **one** ``generator.generate`` call for all branches of all
  prompts in a search step. The prompt of a branch is the prompt extended by its steps so far
  (:meth:`SearchTree.prompt_for`): ``prompt + steps`` for a text prompt; for a chat prompt the
  steps are the assistant's partial answer, which the backend continues (chat template with
  ``continue_final_message``, no end-of-turn), so the rendered text is again "prompt + steps"
  and the backend's prefix cache serves the shared part. When branches ask for different numbers of
  children, the call sends each branch's prefix once per child with ``n=1``; with a fixed
  ``seed`` that would give identical children (sample ``i`` is a function of the seed and ``i``),
  so seeded runs instead make one call per distinct child count (documented exception).
- Seeds: a backend's seeded sample ``i`` draws the same random numbers for every prompt of a
  call (they depend on the seed, ``i`` and the token position only), so a seeded run gives call
  ``j`` the seed ``derive_seed(seed, j)`` (call 0 keeps the seed): successive search steps do not
  repeat the same draws. Within one call, children with the same index of different branches
  still share draws; use ``seed=None`` where that correlation matters (e.g. DVTS at scale).
- Scorers receive the original prompt (a string, or the chat messages as given) and the list of
  steps, never a rendering of them, so each reward model lays them out in its own format.
- Branches of different prompts are never compared with each other: every selection happens
  inside one :class:`SearchTree`.
- Before each call the budget is asked: when it is exhausted, or the remaining generated-token
  budget cannot give every requested sample at least one token, no call is made, the search
  stops with ``stopped_by_budget`` and the best so far is returned. ``max_tokens`` of a call is
  sized so that ``Budget.max_generated_tokens`` can never be exceeded (equal shares, so a step
  does not depend on its siblings), and the call gets what is left of the FLOPs and seconds as
  its allowance, enforced in flight where the backend can (:mod:`metagen.strategies.budget`);
  a step that the cap or the allowance cut short is terminal (``info["budget_cut"]``, finish
  ``"length"``) and marks the run ``stopped_by_budget``.
- A completion with ``finish_reason == "error"`` is dropped and counted in ``Result.failures``;
  a scorer that fails raises (a failed scorer call is never a score).
- Usage is ``generator.usage`` after minus before, plus the scorer's ``usage`` delta (or one
  ``scorer_calls`` per batched call for plain callables); a scorer whose ``generator`` attribute
  is the search's generator is counted through the generator only. In a batched run each prompt
  is charged the generator usage of its own tree's requests (a call that served several trees
  is counted on the first); the rest (scorer usage, wall time, calls made without a tree) is
  apportioned among the prompts by their share of generated tokens (integer fields by largest
  remainder), so the Results' usages sum to the batch total, which each trace also carries.

The pure selection helpers (score, vote, weighted vote) live in
:mod:`metagen.strategies.step_select`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from metagen.allowance import budget_cut
from metagen.errors import InvalidParameterError, MetagenError
from metagen.generators.base import Generator, Prompt, check_prompts
from metagen.generators.metered import metered_generate
from metagen.scorers.base import (
    ProcessRewardLike,
    ProcessRewardModel,
    StepAggregation,
    aggregate_steps,
)
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.step_select import (  # noqa: F401 (re-exported)
    best_by_score,
    choose_by,
    default_answer,
    split_usage,
)
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode, SearchTree
from metagen.types import Completion, FinishReason, Result, SamplingParams, Usage

StepScorerFn = Callable[[list[Prompt], list[list[str]]], list[list[float]]]


def derive_seed(seed: int, call: int) -> int:
    """A distinct, reproducible seed for the ``call``-th generate call of a seeded run."""
    return (seed + 0x9E3779B97F4A7C15 * call) % (2**63 - 1)


def as_step_scorer(prm: ProcessRewardLike) -> StepScorerFn:
    """A batched ``(prompts, steps) -> scores`` function from a PRM or a per-item callable.

    Accepts an object with ``score_steps(prompts, steps)`` (the ProcessRewardModel protocol) or a
    plain callable ``f(prompt, steps) -> list[float] | float`` (a float scores the last step).
    Prompts are passed as the search got them: a string, or a list of chat messages.
    """
    if hasattr(prm, "score_steps"):
        return prm.score_steps
    if callable(prm):
        def batched(prompts: list[Prompt], steps: list[list[str]]) -> list[list[float]]:
            out = []
            for p, s in zip(prompts, steps):
                value = prm(p, s)
                out.append([float(value)] if isinstance(value, (int, float))
                           else [float(v) for v in value])
            return out
        return batched
    raise InvalidParameterError("prm", prm, "must have score_steps(prompts, steps) or be callable")


def _usage_of(obj: object) -> Usage | None:
    usage = getattr(obj, "usage", None)
    return usage if isinstance(usage, Usage) else None


class StepSearch:
    """State of one step-level search over a batch of prompts (one :class:`SearchTree` each)."""

    def __init__(self, name: str, generator: Generator, prompts: Sequence[Prompt],
                 prm: ProcessRewardLike | None, *,
                 params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
                 aggregation: StepAggregation = "last", budget: Budget = UNLIMITED,
                 max_depth: int = 16) -> None:
        self.name = name
        self.generator = generator
        self.trees = [SearchTree(p, i) for i, p in enumerate(check_prompts(prompts))]
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
            raise InvalidParameterError("max_depth", max_depth, "must be a positive integer")
        if not isinstance(steps, StepDefinition):
            raise InvalidParameterError("steps", steps, "must be a StepDefinition")
        if not isinstance(budget, Budget):
            raise InvalidParameterError("budget", budget, "must be a Budget")
        budget.check_generator(generator)
        aggregate_steps([1.0], aggregation)  # validates the mode before any model call
        self.prm = prm
        self._score_fn = as_step_scorer(prm) if prm is not None else None
        self.params = params if params is not None else SamplingParams(temperature=1.0)
        self.steps = steps
        self.aggregation = aggregation
        self.budget = budget
        self.max_depth = max_depth
        self.search_step = 0
        self.stopped_by_budget = False
        self.failures: list[Counter[str]] = [Counter() for _ in self.trees]
        self._gen_start = _usage_of(generator) or Usage()
        # a scorer that runs on the search's own generator (LMStepValue) is already counted there
        shares = prm is not None and getattr(prm, "generator", None) is generator
        self._prm_start = None if shares else _usage_of(prm)
        self._prm_shared = shares
        self._own_scorer_calls = 0
        self._budget_cap: int | None = None  # max_tokens of the last call when the budget cut it
        self._tree_usage = [Usage() for _ in self.trees]  # generator usage of each tree's calls
        self._calls_made = 0

    # ----------------------------------------------------------------- accounting
    def usage(self) -> Usage:
        """Compute spent by this run so far (generator delta plus scorer delta)."""
        total = (_usage_of(self.generator) or Usage()) - self._gen_start
        now = _usage_of(self.prm)
        if self._prm_start is not None and now is not None:
            total = total + (now - self._prm_start)
        return total + Usage(scorer_calls=self._own_scorer_calls)

    def prompt_usages(self, weights: Sequence[float]) -> list[Usage]:
        """Each prompt's usage so far: its tree's own generator usage plus a share, by
        ``weights``, of the rest of :meth:`usage` (scorers, calls made without trees); the
        parts add up to :meth:`usage`."""
        own = sum(self._tree_usage, Usage())
        rest = split_usage(self.usage() - own, weights)
        return [u + part for u, part in zip(self._tree_usage, rest)]

    def _token_cap(self, samples: int, per_sample: int) -> int | None:
        """``max_tokens`` for a call of ``samples`` samples, or ``None`` when no call fits."""
        used = self.usage()
        if self.budget.exhausted(used):
            return None
        remaining = self.budget.remaining_tokens(used)
        if remaining is None:
            return per_sample
        cap = min(per_sample, remaining // samples)
        return cap if cap >= 1 else None

    # ----------------------------------------------------------------- generation
    def continue_prefixes(self, prefixes: list[Prompt], ks: list[int], params: SamplingParams,
                          trees: Sequence[int] | None = None) -> list[list[Completion]] | None:
        """``ks[i]`` completions of ``prefixes[i]`` (group ``i`` of the result), under the
        search's budget, seeding and accounting (see the module contract).

        One ``generator.generate`` call when all ``ks`` are equal; otherwise one call of each
        prefix repeated ``k`` times with ``n=1``, or, when ``params.seed`` is set, one call per
        distinct ``k``. Each call takes ``params`` with ``n`` set and ``max_tokens`` lowered to
        the budget's cap. ``trees[i]`` (when given) is the tree prefix ``i`` belongs to, which
        is charged its usage. Returns ``None``, with ``stopped_by_budget`` set, when the budget
        allows no call; in the seeded case a group whose call the exhausted budget skipped
        stays empty. Completions are returned as the backend gave them (``"error"`` ones
        included). Raises :class:`MetagenError` when the backend returns the wrong number of
        rows or samples."""
        total = sum(ks)
        cap = self._token_cap(total, params.max_tokens)
        if cap is None:
            self.stopped_by_budget = True
            return None
        self._budget_cap = cap if cap < params.max_tokens else None
        if len(set(ks)) == 1:
            out = self._call(prefixes, self._seeded(params).with_(n=ks[0], max_tokens=cap),
                             trees)
            self._check_shape(out, len(prefixes), ks[0])
            return [list(c) for c in out]
        if params.seed is None:
            flat = [p for p, k in zip(prefixes, ks) for _ in range(k)]
            flat_trees = None if trees is None else [t for t, k in zip(trees, ks)
                                                     for _ in range(k)]
            out = self._call(flat, self._seeded(params).with_(n=1, max_tokens=cap), flat_trees)
            self._check_shape(out, len(flat), 1)
            grouped, i = [], 0
            for k in ks:
                grouped.append([c[0] for c in out[i:i + k]])
                i += k
            return grouped
        result: list[list[Completion]] = [[] for _ in ks]
        for k in sorted(set(ks)):
            idx = [i for i, kk in enumerate(ks) if kk == k]
            if self.budget.exhausted(self.usage()):
                self.stopped_by_budget = True
                break
            out = self._call([prefixes[i] for i in idx],
                             self._seeded(params).with_(n=k, max_tokens=cap),
                             None if trees is None else [trees[i] for i in idx])
            self._check_shape(out, len(idx), k)
            for i, comps in zip(idx, out):
                result[i] = list(comps)
        return result

    def _call(self, prefixes: list[Prompt], params: SamplingParams,
              trees: Sequence[int] | None) -> list[list[Completion]]:
        """One generate call within what is left of the budget (its allowance, enforced in
        flight where the backend can); each prefix's usage goes to its tree in ``trees``."""
        allowance = self.budget.allowance(self.usage()) if self.budget != UNLIMITED else None
        call = metered_generate(self.generator, prefixes, params, allowance)
        if trees is not None and len(call.usage) == len(trees):
            for t, used in zip(trees, call.usage):
                self._tree_usage[t] = self._tree_usage[t] + used
        return call.completions

    def _seeded(self, params: SamplingParams) -> SamplingParams:
        """Call ``j`` of a seeded run uses ``derive_seed(seed, j)`` (call 0: the seed itself)."""
        j, self._calls_made = self._calls_made, self._calls_made + 1
        return params if params.seed is None or j == 0 else params.with_(
            seed=derive_seed(params.seed, j))

    @staticmethod
    def _check_shape(out: Sequence[Sequence[Completion]], prompts: int, n: int) -> None:
        if len(out) != prompts or any(len(c) != n for c in out):
            raise MetagenError(f"generator returned {[len(c) for c in out]} completions for "
                               f"{prompts} prompts with n={n}")

    def prefix(self, node: SearchNode, extra: Sequence[str] = ()) -> Prompt:
        """The prompt that continues ``node`` (see :meth:`SearchTree.prompt_for`)."""
        return self.trees[node.tree].prompt_for(node, extra)

    def expand(self, requests: Sequence[tuple[SearchNode, int]],
               params: SamplingParams | None = None, tags: Sequence[int] | None = None
               ) -> list[list[SearchNode]] | None:
        """Give node ``i`` up to ``k_i`` new children in one search step (one batched call).

        Requests naming the same node are merged into one prefix with the summed ``k`` (so a
        seeded call never gives two requests the same samples) and the children are dealt back
        in request order. ``tags[i]`` sets the ``group`` of request ``i``'s children. Returns the
        new (unscored) children per request, or ``None`` when the budget stopped the search
        before the call. Children at ``max_depth`` are terminal (``info["max_depth"]``).
        """
        merged: dict[int, list[int]] = {}
        for i, (node, k) in enumerate(requests):
            if k > 0:
                merged.setdefault(id(node), []).append(i)
        out: list[list[SearchNode]] = [[] for _ in requests]
        if not merged:
            return out
        heads = [requests[idx[0]][0] for idx in merged.values()]
        ks = [sum(requests[i][1] for i in idx) for idx in merged.values()]
        step_params = self.steps.params(params or self.params, n=1)
        groups = self.continue_prefixes([self.prefix(n) for n in heads], ks, step_params,
                                        [n.tree for n in heads])
        if groups is None:
            return None
        self.search_step += 1
        for node, idx, comps in zip(heads, merged.values(), groups):
            node.expanded_at = self.search_step
            pos = 0
            for i in idx:
                for c in comps[pos:pos + requests[i][1]]:
                    group = node.group if tags is None else tags[i]
                    kid = self._child(node, c, group)
                    if kid is not None:
                        out[i].append(kid)
                pos += requests[i][1]
        return out

    def _child(self, node: SearchNode, c: Completion, group: int) -> SearchNode | None:
        if c.finish_reason == "error":
            self.failures[node.tree]["generation_error"] += 1
            return None
        step, final = self.steps.close(c)
        at_limit = node.depth + 1 >= self.max_depth
        kid = self.trees[node.tree].add(
            node, step, terminal=final or at_limit, tokens=c.num_tokens,
            token_ids=tuple(c.token_ids), logprob=c.cumulative_logprob,
            finish_reason=c.finish_reason, group=group)
        if at_limit and not final:
            kid.info["max_depth"] = True
        self._note_cut(kid.info, c)
        return kid

    def _note_cut(self, info: dict[str, Any], c: Completion) -> None:
        """A sample cut short by the budget (its token cap, or in flight) stops the search
        after this step."""
        if budget_cut(c) or (self._budget_cap is not None and c.finish_reason == "length"
                             and c.num_tokens >= self._budget_cap):
            info["budget_cut"] = True
            self.stopped_by_budget = True

    def continue_steps(self, items: Sequence[tuple[SearchNode, list[str]]],
                       params: SamplingParams) -> list[tuple[str, bool, int] | None] | None:
        """One more step for each (node, extra steps) without adding nodes (lookahead).

        Returns per item ``(step, final, tokens)`` or ``None`` for a failed sample; ``None``
        overall when the budget stopped the call.
        """
        if not items:
            return []
        prefixes = [self.prefix(n, extra) for n, extra in items]
        groups = self.continue_prefixes(prefixes, [1] * len(items),
                                        self.steps.params(params, n=1),
                                        [n.tree for n, _ in items])
        if groups is None:
            return None
        out: list[tuple[str, bool, int] | None] = []
        for (node, _), comps in zip(items, groups):
            c = comps[0]
            if c.finish_reason == "error":
                self.failures[node.tree]["generation_error"] += 1
                out.append(None)
                continue
            step, final = self.steps.close(c)
            self._note_cut({}, c)
            out.append((step, final, c.num_tokens))
        return out

    def rollout(self, nodes: Sequence[SearchNode], params: SamplingParams, max_tokens: int
                ) -> list[Completion | None] | None:
        """Complete each node's partial solution to the end in one call (no step stop)."""
        if not nodes:
            return []
        groups = self.continue_prefixes([self.prefix(n) for n in nodes], [1] * len(nodes),
                                        params.with_(n=1, max_tokens=max_tokens),
                                        [n.tree for n in nodes])
        if groups is None:
            return None
        out: list[Completion | None] = []
        for node, comps in zip(nodes, groups):
            c = comps[0]
            node.extra_tokens += c.num_tokens
            if c.finish_reason == "error":
                self.failures[node.tree]["generation_error"] += 1
                out.append(None)
            else:
                out.append(c)
        return out

    # ----------------------------------------------------------------- scoring
    @property
    def has_step_scorer(self) -> bool:
        """Whether the search was given a step scorer (``prm``): without one,
        :meth:`score_paths` and :meth:`score` raise :class:`InvalidParameterError`."""
        return self._score_fn is not None

    def score_paths(self, items: Sequence[tuple[SearchNode, list[str]]]) -> list[list[float]]:
        """Per-step scores of ``node.steps() + extra`` for every item, in one scorer call."""
        if not items:
            return []
        if self._score_fn is None:
            raise InvalidParameterError("prm", None, f"{self.name} needs a step scorer")
        prompts = [self.trees[n.tree].prompt for n, _ in items]
        paths = [n.steps() + list(extra) for n, extra in items]
        scores = self._score_fn(prompts, paths)
        if self._prm_start is None and not self._prm_shared:
            self._own_scorer_calls += 1
        if len(scores) != len(items):
            raise MetagenError(f"step scorer returned {len(scores)} rows for {len(items)} paths")
        out = []
        for row, path in zip(scores, paths):
            row = [float(x) for x in row]
            if not row:
                raise MetagenError(f"step scorer returned no score for a {len(path)}-step path")
            aggregate_steps(row, self.aggregation)  # raises NumericalError on NaN
            out.append(row)
        return out

    def score(self, nodes: Sequence[SearchNode]) -> None:
        """Set ``step_scores`` and the aggregated ``score`` of each node (one scorer call)."""
        nodes = list(nodes)
        for node, row in zip(nodes, self.score_paths([(n, []) for n in nodes])):
            node.step_scores = row
            node.score = aggregate_steps(row, self.aggregation)

    # ----------------------------------------------------------------- results
    @staticmethod
    def completion(node: SearchNode) -> Completion:
        path = node.path()
        lps = [n.logprob for n in path]
        known = [x for x in lps if x is not None]
        finish: FinishReason = "length" if node.info.get("max_depth") \
            or node.finish_reason == "length" else "stop"
        return Completion(
            text=node.text(), token_ids=tuple(t for n in path for t in n.token_ids),
            cumulative_logprob=sum(known) if lps and len(known) == len(lps) else None,
            finish_reason=finish)

    def results(self, choose: Callable[[SearchTree, list[SearchNode]], SearchNode | None]
                | None = None, trace: dict[str, Any] | None = None,
                candidates: Callable[[SearchTree], list[SearchNode]] | None = None,
                per_tree: Callable[[SearchTree], dict[str, Any]] | None = None
                ) -> list[Result]:
        """One Result per prompt: candidates = ``candidates(tree)`` or the terminal leaves
        (else, when none finished, the scored leaves that were not pruned, else all scored
        leaves); best = ``choose(tree, candidates)`` or the highest score (ties: lowest id).
        ``trace`` entries go into every Result's trace, ``per_tree(tree)`` entries into that
        tree's."""
        total = self.usage()
        usages = self.prompt_usages([t.generated_tokens() for t in self.trees])
        out = []
        for tree, usage in zip(self.trees, usages):
            cands = candidates(tree) if candidates is not None else tree.terminal_leaves()
            if not cands:
                leaves = sorted((n for n in tree.root.walk() if n.is_leaf and n.parent is not None
                                 and n.score is not None), key=lambda n: n.id)
                cands = [n for n in leaves if not n.pruned] or leaves
            best_node = choose(tree, cands) if choose is not None else best_by_score(cands)
            info = {"strategy": self.name, "tree": tree.to_dict(),
                    "candidate_ids": [n.id for n in cands],
                    "best_id": None if best_node is None else best_node.id,
                    "search_steps": self.search_step, "nodes": len(tree),
                    "batch_usage": total.to_dict(), "batch_size": len(self.trees)}
            info.update(trace or {})
            if per_tree is not None:
                info.update(per_tree(tree))
            out.append(Result(
                best=None if best_node is None else self.completion(best_node),
                candidates=[self.completion(n) for n in cands],
                scores=[n.score for n in cands], usage=usage, trace=info,
                stopped_by_budget=self.stopped_by_budget,
                failures=dict(self.failures[tree.index])))
        return out
