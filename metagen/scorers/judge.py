"""An LM judge (generative verifier): the probability of "Yes" under a judge prompt.

Zhang et al. 2024, "Generative Verifiers: Reward Modeling as Next-Token Prediction": the score of
a solution is the judge model's probability of answering "Yes" to "Is the answer correct?".
The judge needs a :class:`~metagen.generators.base.ScoringGenerator` (capability
``prompt_scoring``); one ``score()`` call scores the whole batch. Its template is text, so
chat prompts are refused (``InvalidPromptError`` naming ``prompts``): give the judge string
prompts, e.g. the conversation rendered with the policy's chat template.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from metagen.errors import InvalidParameterError
from metagen.generators.base import Prompt, ScoringGenerator, require
from metagen.scorers.base import check_same_length, text_only
from metagen.scorers.callables import check_scores
from metagen.scorers.usage import UsageMeter
from metagen.types import Usage

DEFAULT_TEMPLATE = (
    "{prompt}{completion}\n\nQuestion: Is the answer above correct? Answer Yes or No.\nAnswer:")


class LMJudge:
    """``score(prompts, completions)``: P("Yes") for each judge prompt.

    ``template`` is formatted with ``prompt`` and ``completion``. With ``normalize=True`` (default)
    the score is ``p(yes) / (p(yes) + p(no))``; otherwise the raw ``p(yes)``. Raises
    :class:`~metagen.errors.CapabilityError` at construction when the generator cannot score.
    Usage: the generator's usage during scoring is counted as scorer usage.
    """

    def __init__(self, generator: ScoringGenerator, *, template: str = DEFAULT_TEMPLATE,
                 yes: str = " Yes", no: str = " No", normalize: bool = True) -> None:
        require(generator, "prompt_scoring", why="an LM judge reads p('Yes') via score()")
        for name, value in (("yes", yes), ("no", no)):
            if not isinstance(value, str) or not value:
                raise InvalidParameterError(name, value, "must be a non-empty string")
        if "{completion}" not in template:
            raise InvalidParameterError("template", template, "must contain {completion}")
        self.generator = generator
        self.template = template
        self.yes, self.no = yes, no
        self.normalize = normalize
        self._meter = UsageMeter()

    @property
    def usage(self) -> Usage:
        return self._meter.usage

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        if not prompts:
            return []
        text_prompts = text_only(prompts, "LMJudge")
        judge_prompts = [self.template.format(prompt=p, completion=c)
                         for p, c in zip(text_prompts, completions)]
        options = [self.yes, self.no] if self.normalize else [self.yes]
        before = self.generator.usage
        with self._meter.timed():
            logps = self.generator.score(judge_prompts, [options] * len(judge_prompts))
        spent = self.generator.usage - before
        self._meter.add(spent.prompt_tokens + spent.generated_tokens + spent.scorer_tokens,
                        spent.flops, calls=1)
        out = []
        for row in logps:
            if self.normalize:  # p(yes) / (p(yes) + p(no)), stable for tiny probabilities
                out.append(1.0 / (1.0 + math.exp(min(row[1] - row[0], 700.0))))
            else:
                out.append(math.exp(row[0]))
        return check_scores(out, len(prompts), who="LMJudge")
