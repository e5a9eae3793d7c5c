"""Tasks in chat form: the golden conversation of each task's chat prompt, the run key keeping
text and chat (and thinking) runs apart, answers read after the thinking, and the prompt form
a run takes by default or refuses up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.chat_template import has_chat_template, resolve_prompt_format
from metagen.eval.config import EvalConfig
from metagen.eval.runkey import run_key
from metagen.eval.task_form import task_form
from metagen.eval.tasks import TASKS, get_task
from metagen.testbed import model_path

BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
CODE = ("Please provide a self-contained Python script that solves the following problem in a "
        "markdown code block:")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mbpp_row(task_id: int, text: str, code: str, asserts: list[str]) -> dict:
    return {"task_id": task_id, "text": text, "code": code, "test_setup_code": "",
            "test_list": asserts, "challenge_test_list": []}


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    gsm8k = _jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "Tom has 2 apples and buys 3. How many?", "answer": "2 + 3 = 5\n#### 5"}])
    math = _jsonl(tmp_path / "math.jsonl", [
        {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "answer": "2",
         "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"}])
    humaneval = _jsonl(tmp_path / "humaneval.jsonl", [
        {"task_id": "HumanEval/0", "prompt": "def inc(x):\n    \"\"\"x + 1\"\"\"\n",
         "entry_point": "inc", "canonical_solution": "    return x + 1\n",
         "test": "def check(c):\n    assert c(1) == 2\n"}])
    mbpp = _jsonl(tmp_path / "mbpp.jsonl", [
        _mbpp_row(2, "Write a function to add.", "def add(a, b):\n    return a + b",
                  ["assert add(1, 2) == 3"]),
        _mbpp_row(3, "Write a function to negate.", "def neg(a):\n    return -a",
                  ["assert neg(1) == -1"]),
        _mbpp_row(4, "Write a function to double.", "def dbl(a):\n    return 2 * a",
                  ["assert dbl(2) == 4"]),
        _mbpp_row(11, "Write a function to square.", "def sq(a):\n    return a * a",
                  ["assert sq(3) == 9", "assert sq(0) == 0"])])
    return {"gsm8k": gsm8k, "math500": math, "humaneval": humaneval, "mbpp": mbpp,
            "mbpp_0shot": mbpp}


def _user(question: str) -> dict[str, str]:
    return {"role": "user", "content": f"{CODE}\n```\n{question}\n```"}


SQUARE = "Write a function to square. Your code should pass these tests:\n\n" \
         "assert sq(3) == 9\nassert sq(0) == 0"

GOLDEN = {
    "gsm8k": [{"role": "user", "content": f"Tom has 2 apples and buys 3. How many?\n{BOXED}"}],
    "math500": [{"role": "user", "content": f"What is $1+1$?\n{BOXED}"}],
    "humaneval": [_user("def inc(x):\n    \"\"\"x + 1\"\"\"")],
    "mbpp_0shot": [_user(SQUARE)],
    "mbpp": [
        _user("Write a function to add. Your code should pass these tests:\n\n"
              "assert add(1, 2) == 3"),
        {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n```"},
        _user("Write a function to negate. Your code should pass these tests:\n\n"
              "assert neg(1) == -1"),
        {"role": "assistant", "content": "```python\ndef neg(a):\n    return -a\n```"},
        _user("Write a function to double. Your code should pass these tests:\n\n"
              "assert dbl(2) == 4"),
        {"role": "assistant", "content": "```python\ndef dbl(a):\n    return 2 * a\n```"},
        _user(SQUARE)],
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_task_renders_its_golden_chat_prompt(name, data):
    task = task_form(get_task(name), "chat")
    [item] = task.items(data[name], 1)
    assert item.prompt == GOLDEN[name]
    assert task.system_prompt is None
    [text_item] = get_task(name).items(data[name], 1)
    assert isinstance(text_item.prompt, str) and text_item.id == item.id


def test_the_testbed_chat_prompt_is_its_question():
    [item] = task_form(get_task("testbed"), "chat").items(None, 1)
    [text] = get_task("testbed").items(None, 1)
    assert item.prompt == [{"role": "user", "content": text.problem.question}]
    assert text.prompt == f"Question: {text.problem.question}\nAnswer:\n"


def test_every_task_has_a_chat_form():
    assert all(TASKS[name]().chat is not None for name in TASKS)


def _config(**kw) -> EvalConfig:
    return EvalConfig(task="testbed", model={"base_url": "http://x/v1", "model": "m",
                                             "revision": None},
                      strategy="greedy", ns=(1,), **kw)


def test_text_chat_and_thinking_runs_have_different_keys_and_text_keeps_its_old_fields():
    task = get_task("testbed")
    text, chat = _config().key_fields(task), _config(prompt_format="chat").key_fields(task)
    think = _config(prompt_format="chat", max_thinking_tokens=64).key_fields(task)
    assert text["prompt_template"] == task.template_fingerprint()
    assert text["system_prompt"] is None and "thinking" not in text
    assert chat["prompt_template"].startswith("chat:")
    assert think["thinking"] == {"end_token": "</think>", "max_thinking_tokens": 64}
    assert len({run_key(text), run_key(chat), run_key(think)}) == 3
    assert _config(max_thinking_tokens=64).params.max_tokens == 256 + 64


def test_a_thinking_task_grades_and_votes_only_the_answer_after_its_thinking():
    task = task_form(get_task("testbed"), "chat", "</think>")
    [item] = task.items(None, 1)
    answer = item.problem.answer
    assert task.grade(f"<think>#### {answer + 1}</think> #### {answer}", item.problem)
    assert not task.grade(f"<think>#### {answer}</think> #### {answer + 1}", item.problem)
    assert not task.grade(f"<think>so #### {answer}", item.problem)  # never closed
    assert task.answer_key is not None
    assert task.answer_key.extract(f"<think>1</think>#### {answer}") == str(answer)
    assert task.answer_key.extract(f"<think>#### {answer}") is None
    assert task_form(task, "chat", "</think>") is task  # forming again changes nothing
    with pytest.raises(InvalidParameterError, match="prompt_format"):
        task_form(task, "text")


@pytest.mark.parametrize("value", ["markdown", "", None])
def test_an_unknown_prompt_format_names_prompt_format(value):
    with pytest.raises(InvalidParameterError, match="prompt_format"):
        _config(prompt_format=value)


def test_the_default_form_is_chat_only_for_a_local_model_with_a_template(tmp_path):
    policy = model_path("policy")
    assert not has_chat_template(policy)
    assert resolve_prompt_format(None, policy) == "text"
    assert resolve_prompt_format(None, None) == "text"  # a server's model: text unless asked
    assert resolve_prompt_format("chat", None) == "chat"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    assert resolve_prompt_format(None, tmp_path) == "chat"
    assert resolve_prompt_format("text", tmp_path) == "text"
    with pytest.raises(InvalidParameterError, match="prompt_format.*no chat template") as err:
        resolve_prompt_format("chat", policy)
    assert err.value.param == "prompt_format"


def test_chat_on_a_model_without_template_is_refused_before_anything(tmp_path, capsys):
    from metagen.cli import main

    out = tmp_path / "run"
    code = main(["eval", "testbed", "--model", str(model_path("policy")), "--prompt-format",
                 "chat", "--strategy", "greedy", "--limit", "1", "--out", str(out)])
    assert code == 2 and "prompt_format" in capsys.readouterr().err
    assert not out.exists()


def test_the_unit_test_oracle_is_refused_in_chat_form():
    with pytest.raises(InvalidParameterError, match="prompt_format"):
        EvalConfig(task="mbpp", model={"path": "x"}, strategy="best_of_n", ns=(1,),
                   reward="unit-tests", prompt_format="chat")


@pytest.mark.parametrize(("name", "answer"), [
    ("humaneval", "Here it is:\n```python\ndef inc(x):\n    return x + 1\n```\nDone."),
    ("mbpp", "```python\ndef sq(a):\n    return a * a\n```")])
def test_a_chat_models_fenced_answer_grades_on_the_code_tasks(name, answer, data, request,
                                                              monkeypatch):
    request.getfixturevalue("default_sandbox")
    monkeypatch.setenv("METAGEN_ALLOW_CODE_EXECUTION", "1")
    task = task_form(get_task(name), "chat")
    [item] = task.items(data[name], 1)
    assert task.grade(answer, item.problem)
    assert not task.grade(answer.replace("+ 1", "+ 2").replace("a * a", "a + a"), item.problem)
