"""A generative verifier served as a language model: ``metagen serve <testbed ORM>`` (a real
process on loopback) and ``RemoteLikelihoodVerifier`` (``--reward likelihood+URL?model=NAME``)
give the local ``LikelihoodVerifier``'s scores, and ``metagen eval testbed --strategy
best_of_n`` makes the local ORM's choices with it.

Tolerance: the two sides compute the same float32 forward with different kernels (transformers
against the engine's), so a token's log-prob differs by the accumulation rounding of the
logits (a few 1e-7 relative for these widths, far below 1e-5); a score ``exp(min logp)`` in
(0, 1] moves by at most the change of its log-prob. 1e-4 is the bound the remote verifier
promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from metagen.errors import InvalidParameterError
from metagen.scorers.likelihood import LikelihoodVerifier
from metagen.scorers.resolve import resolve_reward
from metagen.scorers.scorer_spec import canonical_spec, parse_scorer_spec
from metagen.testbed import format_prompt, make_problems, model_path
from tests.server.conftest import spawned_server
from tests.server.test_remote_reward_eval import _eval, _stored

TOL = 1e-4


@pytest.fixture(scope="module")
def served_orm():
    """``metagen serve <testbed ORM>``: the verifier served as what it is, a causal LM."""
    if not (model_path("orm") / "config.json").is_file():
        pytest.skip("the testbed ORM is not trained yet")
    with spawned_server(model_path("orm")) as (_, url):
        yield f"{url}/v1"


def test_spec_parses_and_round_trips():
    spec = parse_scorer_spec("likelihood+http://h:1/v1?model=orm&aggregation=window&window=4",
                             "reward", "reward")
    assert spec.remote_likelihood and spec.target == "http://h:1/v1"
    assert spec.kwargs == {"model": "orm", "aggregation": "window", "window": 4}
    again = parse_scorer_spec(canonical_spec(spec), "reward", "reward")
    assert again.kwargs == spec.kwargs and again.target == spec.target
    for bad, role in (("likelihood+http://h:1/v1", "reward"),
                      ("likelihood+http://h:1/v1?model=m&aggregation=prod", "reward"),
                      ("likelihood+http://h:1/v1?model=m&labels=a", "reward"),
                      ("likelihood+http://h:1/v1?model=m", "prm")):
        with pytest.raises(InvalidParameterError) as err:
            parse_scorer_spec(bad, role, "reward")
        assert err.value.param == "reward"


@pytest.mark.parametrize("aggregation", ["min", "mean", "window"])
def test_scores_equal_the_local_verifier(served_orm, aggregation):
    problems = make_problems("test", 3, seed=11, difficulties=[2, 3])
    prompts = [format_prompt(p) for p in problems]
    completions = [" 4 + 5 = 9\n#### 9", "We add.\n3 * 2 = 6\n#### 6", " no idea"]
    local = LikelihoodVerifier.from_pretrained(model_path("orm"), aggregation=aggregation,
                                               window=2)
    remote = resolve_reward(f"likelihood+{served_orm}?model={Path(model_path('orm')).name}"
                            f"&aggregation={aggregation}&window=2")
    try:
        got, want = remote.score(prompts, completions), local.score(prompts, completions)
        assert got == pytest.approx(want, abs=TOL)
        assert len(set(want)) > 1
        assert remote.usage.scorer_calls == 1 and remote.usage.scorer_tokens > 0
    finally:
        remote.close()


def test_eval_best_of_n_makes_the_local_orms_choices(served_orm, tmp_path):
    remote = f"likelihood+{served_orm}?model={Path(model_path('orm')).name}"
    _eval(tmp_path / "local", str(model_path("orm")), 3)
    _eval(tmp_path / "remote", remote, 3)
    local_chosen, local_texts, local_scores = _stored(tmp_path / "local")
    remote_chosen, remote_texts, remote_scores = _stored(tmp_path / "remote")
    assert remote_texts == local_texts and remote_chosen == local_chosen
    assert remote_scores.keys() == local_scores.keys()
    for key, value in local_scores.items():
        assert remote_scores[key] == pytest.approx(value, abs=TOL)
