"""One evaluation's settings (:class:`EvalConfig`): the task, the policy, the strategies and the
N they run at, sampling, seeds and scorers, validated on construction, and the fields of the run
key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.catalog import loaded_scorers, split_strategy_args, strategy_names
from metagen.eval.runrows import REWARD
from metagen.eval.task_form import check_prompt_format, task_form
from metagen.eval.tasks import CHAT, TEXT, TaskSpec
from metagen.tasks.thinking import THINK_END, check_end_token
from metagen.types import SamplingParams

PRM = "prm"  # the process reward model's name among the run's scorers (never stored)
UNIT_TESTS = "unit-tests"  # the code tasks' oracle reward (it finds problems by text prompt)


def parse_strategies(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"`` or ``("a", "b")`` -> ``("a", "b")`` (blanks dropped); a repeated or unknown
    name (the known ones: :func:`~metagen.eval.catalog.strategy_names`, the registry's and
    ``greedy``), or none, raises ``InvalidParameterError`` naming ``strategy``."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(str(x).strip() for x in names if str(x).strip())
    known = strategy_names()
    if not out or len(set(out)) != len(out) or any(x not in known for x in out):
        raise InvalidParameterError("strategy", value, "must be distinct names among "
                                    f"{', '.join(known)}")
    return out


@dataclass(slots=True, frozen=True)
class EvalConfig:
    """One evaluation. ``model`` describes the policy for the run key and provenance (a local
    path, or a server's ``base_url`` / ``model`` / ``revision``); ``sampling`` holds every
    sampling parameter but ``n`` and ``seed`` (the runner sets those). ``strategy`` is one
    strategy or several (a tuple, or names joined by commas; kept as the comma-joined string):
    the subsampled ones share ONE sample set and its stored scores, ``greedy`` and the others
    (searches, adaptive and refinement strategies) run on their own. Each of ``strategy_args``
    goes to the strategies of the run whose config has the key (:attr:`options`); a key none of
    them takes, or a value out of its bounds, is refused. ``prompt_format`` is the form the
    task's items take (``text``, or ``chat``: messages through the model's chat template;
    :func:`~metagen.eval.task_form.task_form`). ``think_end_token`` (e.g. ``</think>``) makes
    grading and answer extraction read only the text after the completion's thinking (none
    closed: no answer); ``max_thinking_tokens`` is the thinking budget, generated on top of
    ``sampling.max_tokens`` (every call's limit is their sum, :attr:`params`; no forced end of
    thinking), and sets ``think_end_token`` to ``</think>`` when it is not given. Validated on
    construction."""

    task: str
    model: Mapping[str, Any]
    strategy: str | tuple[str, ...]
    ns: tuple[int, ...] = (1, 4, 16)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.8))
    seed: int = 0
    strategy_args: Mapping[str, Any] = field(default_factory=dict)
    reward: str | None = None
    prm: str | None = None
    data: str | None = None
    limit: int | None = None
    max_subsets: int = 32
    attempts: int = 2
    prompt_format: str = TEXT
    think_end_token: str | None = None
    max_thinking_tokens: int | None = None

    def __post_init__(self) -> None:
        check_prompt_format(self.prompt_format)
        if self.max_thinking_tokens is not None:
            if not isinstance(self.max_thinking_tokens, int) or isinstance(
                    self.max_thinking_tokens, bool) or self.max_thinking_tokens < 1:
                raise InvalidParameterError("max_thinking_tokens", self.max_thinking_tokens,
                                            "must be a positive integer")
            if self.think_end_token is None:
                object.__setattr__(self, "think_end_token", THINK_END)
        if self.think_end_token is not None:
            check_end_token(self.think_end_token)
        if self.prompt_format == CHAT and self.reward == UNIT_TESTS:
            raise InvalidParameterError("prompt_format", self.prompt_format,
                                        "--reward unit-tests finds problems by their text "
                                        "prompt: use --prompt-format text")
        object.__setattr__(self, "strategy", ",".join(parse_strategies(self.strategy)))
        if not self.ns or any(not isinstance(n, int) or isinstance(n, bool) or n < 1
                              for n in self.ns) or list(self.ns) != sorted(set(self.ns)):
            raise InvalidParameterError("n", self.ns, "must be increasing positive integers")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise InvalidParameterError("seed", self.seed, "must be a non-negative integer")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InvalidParameterError("limit", self.limit, "must be a positive integer")
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidParameterError("attempts", self.attempts, "must be >= 1")
        self.params.with_(n=max(self.ns), seed=0)  # n_max must be servable (validates)
        split_strategy_args(self.strategies, self.strategy_args)  # raises on a bad entry

    @property
    def params(self) -> SamplingParams:
        """What every generate call of the run samples with (the runner sets ``n`` and
        ``seed``): ``sampling``, its ``max_tokens`` raised by ``max_thinking_tokens``."""
        if self.max_thinking_tokens is None:
            return self.sampling
        return self.sampling.with_(max_tokens=self.sampling.max_tokens + self.max_thinking_tokens)

    def formed(self, task: TaskSpec) -> TaskSpec:
        """``task`` in this run's form (:func:`~metagen.eval.task_form.task_form`)."""
        return task_form(task, self.prompt_format, self.think_end_token)

    @property
    def strategies(self) -> tuple[str, ...]:
        """The run's strategies, in the order given."""
        return tuple(str(self.strategy).split(","))

    @property
    def options(self) -> dict[str, dict[str, Any]]:
        """Strategy name -> its checked ``strategy_args`` (those its config has)."""
        return split_strategy_args(self.strategies, self.strategy_args)

    @property
    def configured(self) -> frozenset[str]:
        """The optional scorers this run gives: ``reward`` with a reward model, ``prm`` with a
        process reward model (e.g. ``weighted_vote`` reads the reward only when given)."""
        return frozenset({REWARD} if self.reward is not None else set()) | (
            {PRM} if self.prm is not None else set())

    @property
    def scorers_needed(self) -> set[str]:
        """Names of the scorers to load for the strategies (their specs' needs and the
        :attr:`configured` optional ones; the task's feedback is not loaded): ``reward``,
        ``confidence``, ``prm``."""
        return loaded_scorers(self.strategies, self.configured)

    def key_fields(self, task: TaskSpec) -> dict[str, Any]:
        """Everything that changes the outputs (the run key's input; ``strategy`` is the
        comma-joined list); ``limit`` is not in it: items are keyed by id, so a larger limit
        extends a run. Each local model folder (the policy's ``path``, ``reward``, ``prm``)
        (``reward`` / ``prm``: the folder its scorer spec loads) also gives its content
        fingerprint (:func:`~metagen.eval.fingerprint.folder_fingerprint`)
        as ``model_files``, ``reward_files``, ``prm_files``: new weights at the same path make a
        new key. A server's model has none (its name and URL are what the key holds). The
        prompt form is in ``prompt_template`` (a chat form's fingerprint starts ``chat:``) and
        ``system_prompt``; a run reading answers after thinking adds ``thinking`` (its end
        token and budget), so a text run's key is what it was before chat forms existed."""
        from metagen._version import __version__
        from metagen.eval.fingerprint import folder_fingerprint

        task = self.formed(task)
        thinking = {} if self.think_end_token is None else {"thinking": {
            "end_token": self.think_end_token, "max_thinking_tokens": self.max_thinking_tokens}}
        sampling = {k: v for k, v in self.sampling.to_dict().items() if k not in ("n", "seed")}
        return {"task": task.name, "data_sha256": task.data_fingerprint(self.data),
                "prompt_template": task.template_fingerprint(),
                "system_prompt": task.system_prompt, **thinking,
                "model": dict(self.model), "sampling": sampling, "n_max": max(self.ns),
                "ns": list(self.ns), "seed": self.seed, "strategy": self.strategy,
                "strategy_args": dict(self.strategy_args), "reward": self.reward,
                "prm": self.prm,
                "max_subsets": self.max_subsets, "metagen_version": __version__,
                "executor_limits": dict(task.executor_limits),
                **{f"{role}_files": found for role, folder in (
                    ("model", self.model.get("path")), ("reward", scorer_folder(self.reward)),
                    ("prm", scorer_folder(self.prm, "prm")))
                    if (found := folder_fingerprint(folder)) is not None}}


def scorer_folder(spec: str | None, role: str = "reward") -> str | None:
    """The local model folder a ``reward`` / ``prm`` scorer spec loads (a plain folder,
    ``likelihood+FOLDER``, ...; :mod:`metagen.scorers.scorer_spec`), None for a remote scorer,
    the unit tests or a spec that does not parse."""
    from metagen.scorers.scorer_spec import parse_scorer_spec, spec_folder

    if spec is None:
        return None
    try:
        return spec_folder(parse_scorer_spec(spec, "prm" if role == "prm" else "reward", role))
    except InvalidParameterError:
        return None


