"""Meta-generation in the request: a ``metagen`` object in the body names a strategy.

``{"metagen": {"strategy": "best_of_n", "n": 16, "reward": "orm", "return": "candidates"}}``
(from the openai SDK: ``extra_body={"metagen": {...}}``) answers with the strategy's choice as
the single choice. Every strategy of the registry (:mod:`metagen.strategies.registry`) that is
available on serve is accepted -- the parallel ones, rejection sampling, the adaptive ones, the
step searches, self-refine, and any strategy module added later -- with its parameters from its
spec (:mod:`metagen.server.strategy_params`); the server names none of them. Reward models are
loaded by name at start (``--orm name=PATH``, ``--prm name=PATH``). The request's own sampling
fields are the samples' parameters (its ``n`` must be 1: the strategy's scale is
``metagen.n``); the run is the spec's ``run`` -- ``spec.run(generator, prompt, n=n,
params=params, budget=budget, scorers=Scorers(reward=..., prm=...), options=options)`` -- so the
choice equals the library function's for the same seed, e.g. ``best_of_n(generator, prompt,
n=n, reward=rm, params=params)``. ``usage`` counts everything spent: every sample's tokens, the
prompt, cached tokens, and the scorers' tokens and calls (``scorer_tokens``, ``scorer_calls``);
the ``metagen`` object of the answer holds the chosen candidate's index, every candidate's
score, whether the budget stopped the run and, when asked, every candidate's text
(``return: "candidates"``) or the run's trace (``return: "tree"``: the search tree of a step
search, whatever trace the strategy keeps otherwise). With ``stream: true`` the answer is
streamed after one progress chunk per generate call (:mod:`metagen.server.strategy_stream`,
:mod:`metagen.server.strategy_calls`). Every run is bounded by the server's policy
(:mod:`metagen.server.strategy_policy`: its scale, its integer options, the samples of one
generate call, a token and call budget from ``max_tokens``). Parameters the library refuses are
a 400 naming the request's own field, before any model call where they can be checked up front:
the run goes as far as its first generate call before the answer starts
(:mod:`metagen.server.strategy_errors`).

Strategy requests run one at a time (so each one's usage is its own; plain requests run
alongside them). A strategy whose client leaves is cancelled (:mod:`metagen.server.cancellation`):
the generate call in flight is aborted at once, its KV blocks freed, a reward model's scoring
call in flight stops before its next batch (:mod:`metagen.scorers.interrupt`), and the strategy
stops before its next stage (its budget is exhausted by the cancellation).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import RewardModel
from metagen.scorers.interrupt import interruptible
from metagen.server.cancellation import CancellableGenerator, Cancellation
from metagen.server.logprobs import chat_block, completion_block
from metagen.server.requests import GenerationRequest
from metagen.server.responses import new_id
from metagen.server.strategy_calls import BoundedGenerator, RunMeter, first_call
from metagen.server.strategy_errors import missing_package, request_error
from metagen.server.strategy_params import NO_REWARD, StrategyRequest
from metagen.server.strategy_policy import policy_budget
from metagen.strategies.budget import Budget
from metagen.strategies.spec import Scorers
from metagen.types import Result, SamplingParams, Usage


@dataclass(slots=True, frozen=True)
class CancellableBudget(Budget):
    """A :class:`Budget` that is also exhausted once ``cancelled`` is set: a strategy whose
    client left stops before its next stage.
    ``on_check`` gets the run's usage so far at each check, i.e. before each stage."""

    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)
    on_check: Callable[[Usage], None] | None = field(default=None, compare=False)

    def exhausted(self, usage: Usage) -> bool:
        if self.on_check is not None:
            self.on_check(usage)
        return self.cancelled.is_set() or Budget.exhausted(self, usage)


def cancellable(budget: Budget | None, cancelled: threading.Event,
                on_check: Callable[[Usage], None] | None = None) -> CancellableBudget:
    """``budget``'s limits (none when None) in a :class:`CancellableBudget` on ``cancelled``."""
    b = budget or Budget()
    return CancellableBudget(b.max_generated_tokens, b.max_flops, b.max_calls, b.max_seconds,
                             cancelled, on_check)


class StrategyRunner:
    """Runs strategy requests over ``generator`` with the named reward models (ORMs) and process
    reward models, one at a time, each in a worker thread (strategies are synchronous)."""

    def __init__(self, generator: Generator, rewards: Mapping[str, RewardModel],
                 prms: Mapping[str, Any] | None = None) -> None:
        self.generator = generator
        self.rewards = dict(rewards)
        self.prms = dict(prms or {})
        self._lock = threading.Lock()  # held by the thread, so a gone client cannot release it

    def scorers(self, sreq: StrategyRequest) -> Scorers:
        """The loaded scorers ``sreq`` names."""
        reward = None if sreq.reward in (None, NO_REWARD) else self.rewards[sreq.reward]
        prm = None if sreq.prm is None else self.prms[sreq.prm]
        return Scorers(reward=reward, prm=prm)

    def call(self, sreq: StrategyRequest, prompt: Prompt, params: SamplingParams,
             budget: Budget, generator: Generator | None = None,
             meter: RunMeter | None = None) -> Result:
        """The library call ``sreq`` names (its spec's ``run``), synchronously, on
        ``generator`` (default: the runner's), its generate calls bounded and counted on
        ``meter`` (:mod:`metagen.server.strategy_calls`)."""
        gen = BoundedGenerator(generator or self.generator, meter or RunMeter())
        return sreq.spec.run(gen, prompt, n=sreq.n, params=params,
                             budget=budget, scorers=self.scorers(sreq), options=sreq.options)

    async def check(self, sreq: StrategyRequest, prompt: Prompt, req: GenerationRequest
                    ) -> None:
        """Run ``sreq`` up to its first generate call, not made, in a worker thread (its setup
        may load a utility's model): what the library or the server's bounds refuse there, or
        an optional package it lacks, is a 400 naming the request's field
        (:mod:`metagen.server.strategy_errors`), before any model call."""
        budget = policy_budget(sreq.budget, req.params.max_tokens)

        def dry_run() -> None:
            first_call(lambda gen: self.call(sreq, prompt, req.params, budget, gen),
                       self.generator)

        try:
            await asyncio.to_thread(dry_run)
        except InvalidParameterError as exc:
            raise request_error(exc, sreq, req) from None
        except ImportError as exc:
            raise missing_package(exc, sreq) from None

    async def run(self, sreq: StrategyRequest, prompt: Prompt, params: SamplingParams,
                  cancelled: threading.Event | None = None,
                  progress: Callable[[Usage], None] | None = None) -> Result:
        """``sreq`` in a worker thread, under the server's budget
        (:func:`~metagen.server.strategy_policy.policy_budget`); setting ``cancelled`` stops it
        before its next generate call and its scorer calls before their next batch and, when it
        is a :class:`Cancellation`, aborts the generate call in flight; ``progress`` (called in
        the worker thread) gets the usage so far before each generate call."""
        flag = cancelled or threading.Event()
        meter = RunMeter(progress)
        budget = cancellable(policy_budget(sreq.budget, params.max_tokens), flag, meter.seen)
        gen: Generator = self.generator
        if isinstance(cancelled, Cancellation):
            gen = CancellableGenerator(gen, asyncio.get_running_loop(), cancelled)

        def work() -> Result:
            with self._lock, interruptible(flag):
                return self.call(sreq, prompt, params, budget, gen, meter)

        return await asyncio.to_thread(work)


def strategy_response(req: GenerationRequest, sreq: StrategyRequest, result: Result,
                      tokenizer: Any, model: str) -> dict[str, Any]:
    """The answer of a strategy request (see the module docstring)."""
    best = result.best
    chosen = next((i for i, c in enumerate(result.candidates) if c is best), None)
    text = "" if best is None else best.text
    block = None
    if best is not None and req.params.logprobs is not None:
        tops = best.top_logprobs if req.params.logprobs else None
        make = chat_block if req.chat else completion_block
        block = make(tokenizer, req.prompts[0], best.token_ids, best.logprobs or (), tops,
                     req.tokens_as_ids)
    choice: dict[str, Any] = {"index": 0, "logprobs": block,
                              "finish_reason": "length" if best is None else best.finish_reason}
    if req.chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    u = result.usage
    info: dict[str, Any] = {"strategy": sreq.strategy, "n": sreq.n, "reward": sreq.reward,
                            "prm": sreq.prm, "chosen": chosen, "scores": list(result.scores),
                            "failures": dict(result.failures),
                            "stopped_by_budget": result.stopped_by_budget}
    if sreq.returns == "candidates":
        info["candidates"] = [c.text for c in result.candidates]
    elif sreq.returns == "tree":
        info["tree"] = result.trace
    return {"id": new_id(req.chat), "object": "chat.completion" if req.chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.generated_tokens,
                      "total_tokens": u.prompt_tokens + u.generated_tokens,
                      "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
                      "scorer_tokens": u.scorer_tokens, "scorer_calls": u.scorer_calls},
            "metagen": info}
