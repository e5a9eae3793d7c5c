"""RemoteLikelihoodVerifier: a generative verifier served as a *language model* — its score is
the model's confidence in the completion, read from the server's echoed prompt log-probs.

A generative verifier (the testbed's ORM, self-certainty, any causal LM read by its token
confidence) is not a classifier: a server that pools it (vLLM ``--runner pooling``) puts an
untrained head on it and answers the same value for every input. Served as what it is — a
causal LM behind an OpenAI-compatible ``/v1/completions`` with ``echo`` and prompt log-probs
(vLLM, ``metagen serve``) — it scores exactly: one echo request per pair
(:meth:`~metagen.generators.openai.OpenAIGenerator.token_logprobs`), the log-probs of the
completion's tokens, aggregated as :class:`~metagen.scorers.LikelihoodVerifier` does
(:func:`~metagen.scorers.likelihood.confidence`: ``min``, ``mean`` or ``window``). So the score
equals the local verifier's up to the two backends' float rounding — when no token straddles
the prompt/completion boundary: such a token counts for the completion here (it ends after the
prompt, as ``OpenAIGenerator.score`` reads it) and not locally (which starts at the first token
that begins in the completion). Prompts that end at a token boundary (a newline, a space
before the answer) never have one.

String prompts only (render a chat template first: the server's template is not the verifier's
business). Failure semantics are :class:`~metagen.OpenAIGenerator`'s: a request that still fails
after its retries raises its typed error naming the server (never a score); usage is counted as
scorer tokens and calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.generators.base import Prompt
from metagen.scorers.base import check_same_length
from metagen.scorers.callables import check_scores
from metagen.scorers.likelihood import Confidence, confidence
from metagen.types import Usage


class RemoteLikelihoodVerifier:
    """An outcome reward: ``exp(agg(logp))`` of the completion's tokens under the model served
    at ``base_url`` (an OpenAI-compatible root, e.g. ``http://127.0.0.1:8000/v1``) as ``model``
    (see the module docstring). ``generator_kwargs`` go to the
    :class:`~metagen.OpenAIGenerator` that carries the requests (``timeout``, ``num_params``,
    retries...)."""

    def __init__(self, base_url: str, model: str, *, aggregation: Confidence = "min",
                 window: int = 16, **generator_kwargs: Any) -> None:
        from metagen.generators.openai import OpenAIGenerator

        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise InvalidParameterError("window", window, "must be a positive integer")
        confidence([0.0], aggregation, window)  # validates the mode
        self.aggregation: Confidence = aggregation
        self.window = window
        self.generator = OpenAIGenerator(base_url, model, **generator_kwargs)

    @property
    def usage(self) -> Usage:
        return self.generator.usage

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        if not prompts:
            return []
        if any(not isinstance(c, str) or not c for c in completions):
            raise InvalidPromptError("completions", "''", "an empty completion has no tokens "
                                     "to score")
        logps = self.generator.token_logprobs(prompts, completions)
        return check_scores([confidence(lp, self.aggregation, self.window) for lp in logps],
                            len(prompts), who="RemoteLikelihoodVerifier")

    def close(self) -> None:
        self.generator.close()
