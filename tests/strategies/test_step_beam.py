"""Step-level beam search on scripted generators and scorers: golden trees, per-prompt beam
isolation, lookahead, budgets, failures, and an end-to-end run on stories260K."""

from __future__ import annotations

import json

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.strategies.budget import Budget
from metagen.strategies.step_beam import step_beam_search

GOLD = {"0": 0.1, "1": 0.9, "2": 0.5, "3": 0.7, "10": 0.2, "11": 0.6, "30": 0.8, "31": 0.1,
        "300": 0.3, "301": 0.95, "110": 0.4, "111": 0.5}


def _ids(node: dict, out=None) -> dict[str, dict]:
    out = {} if out is None else out
    if node["step"]:
        out[node["step"].split()[0]] = node
    for c in node["children"]:
        _ids(c, out)
    return out


def test_scripted_golden_tree_width2_branching2():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    prm = ScriptedPRM(GOLD)
    [res] = step_beam_search(gen, ["Q:\n"], prm, width=2, branching=2)
    assert res.text == "3\n30\n301 #### 301"
    # one generate call per search step: 4 first steps, then 2 children for each kept beam
    assert [(p, c.n) for p, c in gen.calls] == [
        (["Q:\n"], 4), (["Q:\n1\n", "Q:\n3\n"], 2), (["Q:\n3\n30\n", "Q:\n1\n11\n"], 2)]
    assert all(c.stop == ("\n",) for _, c in gen.calls)
    assert len(prm.calls) == 3  # one scorer call per search step
    nodes = _ids(res.trace["tree"])
    assert {k for k, v in nodes.items() if v["pruned"]} == {"0", "2", "31", "10"}
    assert [nodes[k]["id"] for k in ("0", "1", "2", "3", "10", "11", "30", "31")] == \
        [1, 2, 3, 4, 5, 6, 7, 8]
    assert res.trace["candidate_ids"] == [9, 10, 11, 12]
    assert res.scores == [0.3, 0.95, 0.4, 0.5]
    assert [c.text for c in res.candidates][1] == res.text
    # tokens: 4 x "d\n", 4 x "dd\n", 4 x "ddd #### ddd" (one token per character)
    assert res.usage.generated_tokens == 4 * 2 + 4 * 3 + 4 * 12 == gen.usage.generated_tokens
    assert res.usage.calls == 3 and res.usage.scorer_calls == 3
    assert not res.stopped_by_budget and res.failures == {}
    json.dumps(res.trace)


def test_scripted_beams_of_different_prompts_are_never_pooled():
    # prompt A's branches all outscore prompt B's; B must still keep `width` beams of its own
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    prm = ScriptedPRM(lambda prompt, name: (1.0 if prompt.startswith("A") else 0.0)
                      + int(name) / 1000)
    ra, rb = step_beam_search(gen, ["A:\n", "B:\n"], prm, width=2, branching=2)
    assert len(gen.calls) == 3  # both prompts share every call
    assert gen.calls[1][0] == ["A:\n3\n", "A:\n2\n", "B:\n3\n", "B:\n2\n"]
    for res, prompt in ((ra, "A"), (rb, "B")):
        assert res.text == "3\n31\n311 #### 311"
        assert len(res.candidates) == 4
    assert ra.usage.generated_tokens + rb.usage.generated_tokens == gen.usage.generated_tokens
    assert ra.usage.calls + rb.usage.calls == 3
    assert ra.trace["batch_usage"]["generated_tokens"] == gen.usage.generated_tokens


def test_scripted_lookahead_changes_the_choice():
    table = {"0": 0.9, "1": 0.1, "00": 0.1, "10": 0.9}
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [plain] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(table), width=1, branching=2)
    assert plain.text.startswith("0\n")
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [la] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(table), width=1, branching=2,
                            lookahead=1)
    assert la.text.startswith("1\n")
    # the lookahead call is greedy, one sample per child, for both children at once
    prompts, params = gen.calls[1]
    assert prompts == ["Q:\n0\n", "Q:\n1\n"] and params.n == 1 and params.is_greedy
    first = la.trace["tree"]["children"]
    assert first[1]["info"] == {"lookahead_score": 0.9, "lookahead_steps": 1}
    assert first[1]["extra_tokens"] == 3  # "10\n"
    assert la.usage.generated_tokens == gen.usage.generated_tokens


def test_scripted_token_budget_is_never_exceeded_and_returns_best_so_far():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(GOLD), width=2, branching=2,
                             budget=Budget(max_generated_tokens=9))
    assert res.usage.generated_tokens == 8 <= 9 and len(gen.calls) == 1
    assert res.stopped_by_budget and res.text == "1\n"  # best live beam so far
    assert res.trace["candidate_ids"] == [2, 4]


def test_scripted_token_budget_caps_max_tokens_of_a_call():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(GOLD), width=2, branching=2,
                             budget=Budget(max_generated_tokens=30))
    assert [p.max_tokens for _, p in gen.calls] == [7, 5, 2]  # remaining // samples
    assert res.usage.generated_tokens == 28 <= 30
    assert all(c.finish_reason == "length" for c in res.candidates)
    assert res.stopped_by_budget  # the last step was cut short by the budget's token cap


def test_scripted_call_budget():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(GOLD), width=2, branching=2,
                             budget=Budget(max_calls=2))
    assert len(gen.calls) == 2 and res.usage.calls == 2 and res.stopped_by_budget
    assert res.text == "3\n30\n"


def test_scripted_failed_samples_are_dropped_and_counted():
    base = tree_script("Q:\n", depth=2)
    gen = ScriptedStepGenerator(lambda p, i: None if i == 0 else base(p, i))
    [res] = step_beam_search(gen, ["Q:\n"], ScriptedPRM({}), width=1, branching=2)
    assert res.failures == {"generation_error": 2}
    assert all("0" not in c.text.split()[0] for c in res.candidates)


def test_bad_options_fail_before_any_call():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    for kwargs, param in [({"width": 0}, "width"), ({"branching": -1}, "branching"),
                          ({"lookahead": -1}, "lookahead"), ({"select": "best"}, "select"),
                          ({"max_depth": 0}, "max_depth"), ({"aggregation": "max"},
                                                            "aggregation")]:
        with pytest.raises(InvalidParameterError) as err:
            step_beam_search(gen, ["Q:\n"], ScriptedPRM({}), **kwargs)
        assert err.value.param == param
    for bad in ("Q:\n", [""], [[{"role": "user"}]]):  # chat prompts are fine, malformed not
        with pytest.raises(InvalidPromptError):
            step_beam_search(gen, bad, ScriptedPRM({}))
    assert gen.calls == []


def test_scripted_vote_selection():
    # six finished solutions, all scored 0: "#### 9" twice (ids first), "#### 7" four times
    def script(prefix: str, i: int) -> str:
        body = prefix.split("Q:\n", 1)[1]
        return f"s{i}\njunk" if not body else f"#### {9 if i == 0 else 7}"
    prm = ScriptedPRM({"s0": 0.5, "s1": 0.4, "####": 0.0})
    [res] = step_beam_search(ScriptedStepGenerator(script), ["Q:\n"], prm, width=2,
                             branching=3, select="vote")
    assert res.text == "s0\n#### 7"
    [res] = step_beam_search(ScriptedStepGenerator(script), ["Q:\n"], prm, width=2,
                             branching=3, select="score")
    assert res.text == "s0\n#### 9"  # equal scores: lowest id
