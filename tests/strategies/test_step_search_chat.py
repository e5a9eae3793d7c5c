"""Step search on a chat model: the built-in engine on stories260K with a small chat template.

Every generate call's rendered input is the template's rendering of the conversation with the
steps so far as the assistant's open answer (``continue_final_message``: no end-of-turn), and the
whole search equals the same search on the equivalent pre-rendered text prompt (same tree: steps,
scores, tokens). A declared-format PRM in a chat search reads its own template's rendering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import with_chat_template

import metagen.generators.tokenize as tokenize_mod
from metagen.strategies.best_first import best_first
from metagen.strategies.dvts import dvts
from metagen.strategies.mcts import mcts
from metagen.strategies.rebase import rebase
from metagen.strategies.step_beam import step_beam_search
from metagen.strategies.steps import StepDefinition
from metagen.types import SamplingParams

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]
SENTENCES = StepDefinition(stop=(".",), max_step_tokens=48, final_marker=None)
SEEDED = SamplingParams(temperature=1.0, seed=7)

SEARCHES: dict[str, Any] = {
    "step_beam_search": lambda g, p, prm: step_beam_search(
        g, p, prm, width=2, branching=2, max_depth=3, steps=SENTENCES, params=SEEDED),
    "dvts": lambda g, p, prm: dvts(g, p, prm, subtrees=2, branching=2, max_depth=3,
                                   steps=SENTENCES, params=SEEDED),
    "best_first": lambda g, p, prm: best_first(g, p, prm, branching=2, max_expansions=3,
                                               max_depth=3, steps=SENTENCES, params=SEEDED),
    "mcts": lambda g, p, prm: mcts(g, p, prm, iterations=3, branching=2, max_depth=3,
                                   rollout_max_tokens=16, steps=SENTENCES, params=SEEDED),
    "rebase": lambda g, p, prm: rebase(g, p, prm, width=4, max_depth=3, steps=SENTENCES,
                                       params=SEEDED),
}


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory, stories_path) -> Path:
    """stories260K with a chat template added to its tokenizer."""
    return with_chat_template(tmp_path_factory.mktemp("stories_chat"), TEMPLATE)


@pytest.fixture(scope="module")
def chat_gen(chat_model_dir):
    from metagen.generators.local import LocalGenerator
    return LocalGenerator.from_pretrained(chat_model_dir)


@pytest.fixture
def rendered(monkeypatch) -> list[tuple[Any, str]]:
    """Every (prompt, text the generator tokenizes) of the generate calls that follow."""
    seen: list[tuple[Any, str]] = []
    real = tokenize_mod.render_prompt

    def spy(tokenizer: Any, prompt: Any) -> str:
        text = real(tokenizer, prompt)
        seen.append((prompt, text))
        return text

    monkeypatch.setattr(tokenize_mod, "render_prompt", spy)
    return seen


def _sentence_value(prompt: Any, steps: list[str]) -> list[float]:
    """A plain-callable PRM: prefers sentences of about 30 characters."""
    return [-abs(len(s) - 30) / 30 for s in steps]


def _texts(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """The partial solutions of every node of a trace tree (root: "")."""
    here = prefix + tree["step"]
    out = {here}
    for child in tree["children"]:
        out |= _texts(child, here)
    return out


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_chat_search_continues_the_assistant_answer_and_equals_the_text_search(
        name, chat_gen, rendered):
    tok = chat_gen.tokenizer
    seen_prompts: list[Any] = []

    def prm(prompt: Any, steps: list[str]) -> list[float]:
        seen_prompts.append(prompt)
        return _sentence_value(prompt, steps)

    [chat] = SEARCHES[name](chat_gen, [MESSAGES], prm)
    chat_inputs = list(rendered)
    rendered.clear()
    opening = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert opening.startswith(tok.bos_token)
    text_prompt = opening[len(tok.bos_token):]  # the string path adds BOS itself
    [text] = SEARCHES[name](chat_gen, [text_prompt], _sentence_value)

    # every generate input: the conversation with the steps so far as the open assistant turn
    partials = _texts(chat.trace["tree"])
    continued = 0
    for prompt, got in chat_inputs:
        assert prompt[:2] == MESSAGES
        if len(prompt) == 2:  # the root: a new assistant turn
            assert got == opening
            continue
        assert len(prompt) == 3 and prompt[2]["role"] == "assistant"
        so_far = prompt[2]["content"]
        assert so_far in partials  # a node of the tree: its steps so far
        want = tok.apply_chat_template(MESSAGES + [{"role": "assistant", "content": so_far}],
                                       tokenize=False, continue_final_message=True)
        assert got == want and got.endswith(so_far)  # no end-of-turn after the partial answer
        continued += 1
    assert continued > 0
    assert MESSAGES == [{"role": "system", "content": "Tell a story."},
                        {"role": "user", "content": "Once upon a time"}]  # not mutated
    # the scorer got the original messages, never a rendering
    assert seen_prompts and all(p == MESSAGES for p in seen_prompts)

    # equivalence: the same inputs as text, the same tree, the same answer
    assert [got for _, got in rendered] == [got[len(tok.bos_token):] for _, got in chat_inputs]
    assert chat.trace["tree"] == text.trace["tree"]
    assert chat.text == text.text and chat.scores == text.scores
    assert chat.usage.generated_tokens == text.usage.generated_tokens > 0


def test_a_given_assistant_prefix_is_continued_with_the_steps(chat_gen, rendered):
    start = [{"role": "user", "content": "Tell a story."},
             {"role": "assistant", "content": "Once upon a time"}]
    seen: list[Any] = []

    def prm(prompt: Any, steps: list[str]) -> list[float]:
        seen.append(prompt)
        return _sentence_value(prompt, steps)

    [chat] = SEARCHES["step_beam_search"](chat_gen, [start], prm)
    tok = chat_gen.tokenizer
    partials = _texts(chat.trace["tree"])
    for prompt, got in rendered:
        so_far = prompt[-1]["content"][len("Once upon a time"):]
        assert len(prompt) == 2 and prompt[0] == start[0] and so_far in partials
        assert got == tok.apply_chat_template(
            [start[0], {"role": "assistant", "content": "Once upon a time" + so_far}],
            tokenize=False, continue_final_message=True)
    assert seen and all(p == start for p in seen)
    text_prompt = rendered[0][1][len(tok.bos_token):]
    [text] = SEARCHES["step_beam_search"](chat_gen, [text_prompt], _sentence_value)
    assert chat.trace["tree"] == text.trace["tree"]


# --------------------------------------------------------------- a declared-format PRM
from tests.scorers.test_prm_layouts import causal_path, tokenizer_dir  # noqa: E402,F401


def _scored_paths(tree: dict[str, Any], above: tuple[str, ...] = ()) -> list[list[str]]:
    """The step lists of every scored node of a trace tree."""
    here = above + (tree["step"],) if tree["id"] else above
    out = [list(here)] if tree["score"] is not None else []
    for child in tree["children"]:
        out += _scored_paths(child, here)
    return out


@pytest.mark.parametrize("preset", ["math-shepherd", "rlhflow-llama3.1-8b-prm"])
def test_formatted_prm_in_a_chat_search_reads_its_own_template(preset, chat_gen, causal_path):
    from transformers import AutoTokenizer

    from metagen.scorers import load_prm
    prm = load_prm(causal_path, format=preset)
    read: list[str] = []
    real = prm._score_rendered

    def spy(rows: Any) -> Any:
        read.extend(r.text for r in rows)
        return real(rows)

    prm._score_rendered = spy
    question = [{"role": "user", "content": "Q: 2+3?"}]
    [res] = step_beam_search(chat_gen, [question], prm, width=2, branching=2, max_depth=2,
                             steps=SENTENCES, params=SEEDED)
    tok = AutoTokenizer.from_pretrained(causal_path)
    want = []
    for steps in _scored_paths(res.trace["tree"]):
        if preset == "math-shepherd":  # its recipe "question step ки\nstep ки", in a user turn
            opening = tok.apply_chat_template([{"role": "user", "content": "Q: 2+3? "}],
                                              tokenize=False, add_generation_prompt=True)
            want.append(opening + "\n".join(f"{s.strip()} ки" for s in steps))
        else:  # RLHFlow: user "question step 1", assistant "+", user "step 2", assistant "+"
            conv: list[dict[str, str]] = []
            for k, s in enumerate(steps):
                conv += [{"role": "user", "content": f"Q: 2+3? {s.strip()}" if k == 0
                          else s.strip()}, {"role": "assistant", "content": "+"}]
            want.append(tok.apply_chat_template(conv, tokenize=False))
    assert len(want) >= 4 and sorted(read) == sorted(want)


# --------------------------------------------------------------- refinement as turns
def test_refine_with_feedback_chat_turns_scripted_feedback(chat_gen, rendered):
    from metagen.strategies.refine import FEEDBACK_TURN, Feedback, refine_with_feedback
    got: list[Any] = []

    def feedback(prompt: Any, attempt: str) -> Feedback:
        got.append(prompt)
        return Feedback(ok=len(got) >= 3, message=f"note {len(got)}", score=float(len(got)))

    [res] = refine_with_feedback(chat_gen, [MESSAGES], feedback, max_attempts=3,
                                 params=SamplingParams(temperature=1.0, seed=3, max_tokens=12))
    attempts = [a["text"] for a in res.trace["chain"]]
    assert len(attempts) == 3 and res.trace["stop_reason"] == "success"
    assert all(p == MESSAGES for p in got)  # feedback sees the original messages
    want = [MESSAGES] + [MESSAGES + [{"role": "assistant", "content": attempts[k]},
                                     {"role": "user",
                                      "content": FEEDBACK_TURN.format(feedback=f"note {k + 1}")}]
                         for k in range(2)]
    assert [p for p, _ in rendered] == want
    tok = chat_gen.tokenizer
    assert [t for _, t in rendered] == [
        tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in want]


def test_self_refine_chat_turns(chat_gen, rendered):
    from metagen.strategies.refine import CRITIQUE_TURN, REFINE_TURN, self_refine
    [res] = self_refine(chat_gen, [MESSAGES], max_attempts=2,
                        params=SamplingParams(temperature=1.0, seed=5, max_tokens=10),
                        critique_params=SamplingParams(temperature=1.0, seed=6, max_tokens=6))
    chain = res.trace["chain"]
    assert len(chain) == 2 and all(a["feedback"] for a in chain)
    a1, a2 = chain[0]["text"], chain[1]["text"]

    def turn(text: str, role: str = "assistant") -> dict[str, str]:
        return {"role": role, "content": text}

    want = [MESSAGES,
            MESSAGES + [turn(a1), turn(CRITIQUE_TURN, "user")],
            MESSAGES + [turn(a1), turn(CRITIQUE_TURN, "user"), turn(chain[0]["feedback"]),
                        turn(REFINE_TURN, "user")],
            MESSAGES + [turn(a2), turn(CRITIQUE_TURN, "user")]]
    assert [p for p, _ in rendered] == want


def test_treefinement_chat_children_continue_the_conversation_scripted_feedback(chat_gen,
                                                                               rendered):
    from metagen.strategies.refine import FEEDBACK_TURN, Feedback
    from metagen.strategies.treefinement import treefinement
    [res] = treefinement(chat_gen, [MESSAGES], lambda p, a: Feedback(False, f"len {len(a)}",
                                                                     float(len(a))),
                         width=2, max_depth=2, patience=5,
                         params=SamplingParams(temperature=1.0, seed=9, max_tokens=10))
    first = [c for c in res.trace["tree"]["children"]]
    assert len(first) == 2
    by_attempt = {c["step"]: MESSAGES + [
        {"role": "assistant", "content": c["step"]},
        {"role": "user", "content": FEEDBACK_TURN.format(feedback=c["info"]["feedback"])}]
        for c in first}
    prompts = [p for p, _ in rendered]
    assert prompts[0] == MESSAGES
    second = prompts[1:]
    assert second and all(p in by_attempt.values() for p in second)
    assert sum(len(c["children"]) for c in first) == 2
