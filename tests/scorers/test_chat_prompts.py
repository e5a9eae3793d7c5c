"""Scorers on chat prompts: the Hugging Face reward models read the conversation as their
tokenizer's chat template renders it (checked against a plain transformers forward and against
the equivalent pre-rendered string prompt); scorers that cannot read chat refuse it naming
``prompts`` before any work; callables and verifiers receive the messages as they are."""

from __future__ import annotations

import math

import pytest
import torch

from metagen.errors import InvalidPromptError
from metagen.scorers import (AnswerMatch, HFProcessRewardModel, HFRewardModel, LikelihoodVerifier,
                             LMJudge)
from metagen.scorers.callables import CallableReward
from metagen.strategies.tot import LMStepValue
from tests.scorers.test_judge import TABLE, ScriptedScorer

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
TRIMMING = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | trim }}"
            "</s>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Once upon a time"}]
COMPLETIONS = [" there was a dog.\nIt ran.", " a cat sat.\nThe end.\n"]
STEPS = [[" there was a dog.\n", "It ran."], [" a cat sat.\n", "The end.\n"]]


def _with_template(scorer, template: str = TEMPLATE):
    scorer.tokenizer.chat_template = template
    return scorer


def _flat(rows: list[list[float]]) -> list[float]:
    return [x for row in rows for x in row]


def _opening(tokenizer) -> str:
    """The chat prompt's rendering as text, without the BOS the string path adds itself."""
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text.startswith(tokenizer.bos_token)
    return text[len(tokenizer.bos_token):]


def test_orm_reads_the_templated_conversation_like_transformers(orm_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    rm = _with_template(HFRewardModel.from_pretrained(orm_path))
    got = rm.score([MESSAGES] * 2, COMPLETIONS)
    tok = AutoTokenizer.from_pretrained(orm_path)
    tok.chat_template = TEMPLATE
    model = AutoModelForSequenceClassification.from_pretrained(orm_path).eval()
    want = []
    for completion in COMPLETIONS:  # the reward at the last token of the whole conversation
        ids = tok.apply_chat_template(MESSAGES + [{"role": "assistant", "content": completion}],
                                      tokenize=True, return_dict=True)["input_ids"]
        with torch.no_grad():
            logit = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
        want.append(1.0 / (1.0 + math.exp(-logit)))
    assert got == pytest.approx(want, abs=1e-5)


def test_prm_chat_steps_equal_the_prerendered_string_prompt(prm_path):
    prm = _with_template(HFProcessRewardModel.from_pretrained(prm_path))
    chat = prm.score_steps([MESSAGES] * 2, STEPS)
    # the end-of-turn after the response does not reach the (causal) step positions
    text = prm.score_steps([_opening(prm.tokenizer)] * 2, STEPS)
    assert [len(r) for r in chat] == [2, 2]
    assert _flat(chat) == pytest.approx(_flat(text), abs=1e-5)


def test_prm_with_a_trimming_template_reads_the_trimmed_last_step(prm_path):
    prm = _with_template(HFProcessRewardModel.from_pretrained(prm_path), TRIMMING)
    chat = prm.score_steps([MESSAGES], [STEPS[1]])  # " a cat sat.\n", "The end.\n": trimmed
    text = prm.score_steps([_opening(prm.tokenizer)], [["a cat sat.\n", "The end."]])
    assert _flat(chat) == pytest.approx(_flat(text), abs=1e-5)


def test_likelihood_reads_a_chat_prompt_as_the_generator_continues_it(stories_path):
    verifier = _with_template(LikelihoodVerifier.from_pretrained(stories_path))
    chat_out = verifier.score([MESSAGES] * 2, COMPLETIONS)
    chat_steps = verifier.score_steps([MESSAGES] * 2, STEPS)
    opening = _opening(verifier.tokenizer)
    assert chat_out == pytest.approx(verifier.score([opening] * 2, COMPLETIONS), abs=1e-6)
    assert _flat(chat_steps) == pytest.approx(_flat(verifier.score_steps([opening] * 2, STEPS)),
                                             abs=1e-6)


@pytest.mark.parametrize("make", ["orm", "prm", "likelihood"])
def test_no_chat_template_is_a_typed_error_naming_prompts(make, orm_path, prm_path,
                                                          stories_path):
    scorer = {"orm": lambda: HFRewardModel.from_pretrained(orm_path),
              "prm": lambda: HFProcessRewardModel.from_pretrained(prm_path),
              "likelihood": lambda: LikelihoodVerifier.from_pretrained(stories_path)}[make]()
    assert not scorer.tokenizer.chat_template
    with pytest.raises(InvalidPromptError, match="chat template") as err:
        scorer.score([MESSAGES], COMPLETIONS[:1])
    assert err.value.param == "prompts"
    assert scorer.usage.scorer_calls == 0  # refused before any work


def test_text_template_scorers_refuse_chat_prompts_scripted():
    gen = ScriptedScorer(TABLE)
    for call in (lambda: LMJudge(gen).score([MESSAGES], ["right"]),
                 lambda: LMStepValue(gen).score_steps([MESSAGES], [["right"]])):
        with pytest.raises(InvalidPromptError, match="string prompts") as err:
            call()
        assert err.value.param == "prompts"
    assert gen.calls == []


def test_answer_match_and_callables_with_chat_prompts():
    with pytest.raises(InvalidPromptError, match="callable reference") as err:
        AnswerMatch({"Once upon a time": "5"}).score([MESSAGES], ["#### 5"])
    assert err.value.param == "prompts"
    assert AnswerMatch("5").score([MESSAGES, "q"], ["#### 5", "#### 4"]) == [1.0, 0.0]
    seen = []
    by_user = AnswerMatch(lambda p: seen.append(p) or ("5" if p[-1]["content"] else "0"))
    assert by_user.score([MESSAGES], ["#### 5"]) == [1.0] and seen == [MESSAGES]
    got = []
    assert CallableReward(lambda p, c: got.append(p) or 0.5).score([MESSAGES], ["x"]) == [0.5]
    assert got == [MESSAGES]  # the messages as given, not a rendering
