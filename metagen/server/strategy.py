"""Meta-generation in the request: a ``metagen`` object in the body names a strategy.

``{"metagen": {"strategy": "best_of_n", "n": 16, "reward": "orm", "return_candidates": true}}``
(from the openai SDK: ``extra_body={"metagen": {...}}``) answers with the strategy's choice as
the single choice. ``reward`` names a reward model loaded at start (``--orm name=PATH``; may be
left out when exactly one is loaded). The request's own sampling fields are the samples'
parameters (its ``n`` must be 1: the strategy's ``n`` is ``metagen.n``); the choice equals the
library's ``best_of_n(generator, prompt, n=n, reward=rm, params=params)`` for the same seed.
``usage`` counts everything spent: every sample's tokens, the prompt once, cached tokens, and the
reward model's tokens and calls (``scorer_tokens``, ``scorer_calls``); the ``metagen`` object of
the answer holds the chosen candidate's index, every candidate's score and, when asked, every
candidate's text.

Unknown strategies and parameters are 400s naming the field (``metagen.strategy``,
``metagen.<name>``). Strategy requests run one at a time (so each one's usage is its own; plain
requests run alongside them); a strategy request runs to its end even if its client leaves.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import RewardModel
from metagen.server.errors import bad_request
from metagen.server.logprobs import chat_block, completion_block
from metagen.server.requests import GenerationRequest
from metagen.server.responses import new_id
from metagen.strategies.best_of_n import best_of_n
from metagen.types import Result, SamplingParams

MAX_STRATEGY_N = 256
# strategy -> the keys its ``metagen`` object may hold
STRATEGY_FIELDS: dict[str, frozenset[str]] = {
    "best_of_n": frozenset({"strategy", "n", "reward", "return_candidates"}),
}


@dataclass(slots=True, frozen=True)
class StrategyRequest:
    """A validated ``metagen`` object."""

    strategy: str
    n: int
    reward: str
    return_candidates: bool = False


def parse_strategy(value: Any, rewards: Mapping[str, RewardModel]) -> StrategyRequest:
    """The ``metagen`` object of a body, or a 400 naming the field at fault."""
    if not isinstance(value, dict):
        raise bad_request("metagen", "metagen must be an object naming a strategy")
    name = value.get("strategy")
    if name not in STRATEGY_FIELDS:
        raise bad_request("metagen.strategy", f"unknown strategy {str(name)[:40]!r}; known: "
                          f"{sorted(STRATEGY_FIELDS)}")
    unknown = sorted(k for k in value if k not in STRATEGY_FIELDS[name])
    if unknown:
        raise bad_request(f"metagen.{unknown[0][:40]}", f"unknown {name} parameter(s) "
                          f"{', '.join(repr(k[:40]) for k in unknown[:10])}; known: "
                          f"{sorted(STRATEGY_FIELDS[name] - {'strategy'})}")
    n = value.get("n", 16)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_STRATEGY_N:
        raise bad_request("metagen.n", f"metagen.n must be an integer in [1, {MAX_STRATEGY_N}]")
    reward = value.get("reward")
    if reward is None and len(rewards) == 1:
        reward = next(iter(rewards))
    if not isinstance(reward, str) or reward not in rewards:
        loaded = sorted(rewards) or "none (start the server with --orm NAME=PATH)"
        raise bad_request("metagen.reward", f"unknown reward model {str(reward)[:40]!r}; "
                          f"loaded: {loaded}")
    candidates = value.get("return_candidates", False)
    if not isinstance(candidates, bool):
        raise bad_request("metagen.return_candidates", "return_candidates must be true or false")
    return StrategyRequest(name, n, reward, candidates)


class StrategyRunner:
    """Runs strategy requests over ``generator`` with the named reward models, one at a time,
    each in a worker thread (strategies are synchronous)."""

    def __init__(self, generator: Generator, rewards: Mapping[str, RewardModel]) -> None:
        self.generator = generator
        self.rewards = dict(rewards)
        self._lock = threading.Lock()  # held by the thread, so a gone client cannot release it

    async def run(self, sreq: StrategyRequest, prompt: Prompt, params: SamplingParams) -> Result:
        def work() -> Result:
            with self._lock:
                result = best_of_n(self.generator, prompt, n=sreq.n,
                                   reward=self.rewards[sreq.reward], params=params)
            assert isinstance(result, Result)
            return result

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
                            "chosen": chosen, "scores": list(result.scores),
                            "failures": dict(result.failures)}
    if sreq.return_candidates:
        info["candidates"] = [c.text for c in result.candidates]
    return {"id": new_id(req.chat), "object": "chat.completion" if req.chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.generated_tokens,
                      "total_tokens": u.prompt_tokens + u.generated_tokens,
                      "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
                      "scorer_tokens": u.scorer_tokens, "scorer_calls": u.scorer_calls},
            "metagen": info}
