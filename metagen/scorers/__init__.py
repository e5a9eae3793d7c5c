"""metagen.scorers: reward models, process reward models (:func:`load_prm`), remote reward models
(:class:`RemoteRewardModel`, :class:`RemoteProcessRewardModel`: vLLM ``/pooling`` and
``/classify`` or a plain JSON contract), verifiers, an LM judge, MBR utilities; and
:func:`resolve_scorer`, the one place a scorer spec string (``FOLDER``, ``likelihood``,
``pooling+URL?model=NAME``, ...; :mod:`metagen.scorers.scorer_spec`) becomes a scorer.

Every scorer takes whole batches; a plain Python callable works wherever a reward model does
(:func:`as_reward`). Model-backed scorers expose a cumulative ``usage``. Heavy imports (torch,
transformers, sacrebleu, rouge-score, httpx) happen only when a scorer is constructed.
"""

from metagen.scorers.base import (
    ProcessRewardModel,
    RewardModel,
    StepAggregation,
    Utility,
    aggregate_steps,
)
from metagen.scorers.callables import CallableReward, as_reward, check_scores
from metagen.scorers.execution import ExecutionAgreementUtility
from metagen.scorers.formatted_prm import FormattedPRM
from metagen.scorers.hf_reward import HFProcessRewardModel, HFRewardModel, split_steps
from metagen.scorers.judge import LMJudge
from metagen.scorers.likelihood import LikelihoodVerifier, confidence, lowest_window_mean
from metagen.scorers.load_prm import load_prm
from metagen.scorers.prm_format import PRM_PRESETS, PRMFormat
from metagen.scorers.remote_prm import RemoteProcessRewardModel
from metagen.scorers.remote_reward import RemoteRewardModel
from metagen.scorers.resolve import resolve_prm, resolve_reward, resolve_scorer
from metagen.scorers.scorer_spec import ScorerSpec, parse_scorer_spec
from metagen.scorers.unit_tests import UnitTestVerifier
from metagen.scorers.usage import UsageMeter, usage_of
from metagen.scorers.utilities import (
    AnswerMatchUtility,
    BleuUtility,
    ChrFUtility,
    EmbeddingCosineUtility,
    RougeUtility,
)
from metagen.scorers.verifiers import AnswerMatch

__all__ = [
    "AnswerMatch",
    "AnswerMatchUtility",
    "BleuUtility",
    "CallableReward",
    "ChrFUtility",
    "EmbeddingCosineUtility",
    "ExecutionAgreementUtility",
    "FormattedPRM",
    "HFProcessRewardModel",
    "HFRewardModel",
    "LMJudge",
    "LikelihoodVerifier",
    "PRMFormat",
    "PRM_PRESETS",
    "ProcessRewardModel",
    "RemoteProcessRewardModel",
    "RemoteRewardModel",
    "RewardModel",
    "RougeUtility",
    "ScorerSpec",
    "StepAggregation",
    "UnitTestVerifier",
    "UsageMeter",
    "Utility",
    "aggregate_steps",
    "as_reward",
    "check_scores",
    "confidence",
    "load_prm",
    "lowest_window_mean",
    "parse_scorer_spec",
    "resolve_prm",
    "resolve_reward",
    "resolve_scorer",
    "split_steps",
    "usage_of",
]
