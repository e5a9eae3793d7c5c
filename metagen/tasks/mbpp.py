"""MBPP (Austin et al. 2021, "Program Synthesis with Large Language Models"): short Python tasks
graded by three asserts each.

The loader reads ``mbpp.jsonl`` given its path (nothing is downloaded); each line has ``text``
(the task), ``code`` (the reference), ``task_id``, ``test_setup_code``, ``test_list`` and
``challenge_test_list`` (not used). The standard split (:data:`MBPP_SPLITS`): test = task ids
11-510, few-shot prompts = 2-4 (of 1-10), validation = 511-600, train = 601-974.

The prompt is the paper's: per example ``You are an expert Python programmer, and here is your
task: {text} Your code should pass these tests:\\n\\n{asserts}\\n[BEGIN]\\n{code}\\n[DONE]``,
three examples (ids 2-4) then the task with ``[BEGIN]`` open; a completion ends at
``[DONE]``. ``shots=0`` gives the zero-shot variant (the task alone, ``[BEGIN]`` open), for
models whose context cannot hold the ~1,400-token 3-shot prompt. The entry point is the
function the asserts call that the reference defines; each assert is one test, run in the
trusted test process after ``test_setup_code``.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.sandbox.code_problem import CodeProblem
from metagen.tasks.chat_format import code_block, code_chat
from metagen.tasks.jsonl import check_limit, read_jsonl

MBPP_SPLITS: dict[str, tuple[int, int]] = {
    "test": (11, 510), "prompt": (1, 10), "validation": (511, 600), "train": (601, 974)}
FEW_SHOT_IDS = (2, 3, 4)
END_MARKER = "[DONE]"

#: Test-split items whose reference ``code`` cannot pass under strict grading, with the reason
#: (values cross between the test and the program's process only as exact primitive types):
#: the best possible score on the 500 is 496.
UNPASSABLE: dict[int, str] = {
    40: "returns a collections.Counter (a dict subclass), not a primitive dict",
    88: "returns a collections.Counter (a dict subclass), not a primitive dict",
    124: "the tests pass a complex number, not a primitive value",
    367: "test_setup_code builds Node trees from the program's own class",
}


def load_mbpp(path: str | Path, split: str = "test", limit: int | None = None,
              shots: int = 3) -> list[CodeProblem]:
    """The ``split`` of ``mbpp.jsonl`` (a key of :data:`MBPP_SPLITS`, or ``"all"``) in task-id
    order, at most ``limit``; each problem's ``prompt`` is the ``shots``-shot prompt (0-3; the
    paper's is 3). Raises ``FileNotFoundError``, or ``InvalidParameterError`` naming
    ``split``/``limit``/``shots`` or the line of a malformed record."""
    if split != "all" and split not in MBPP_SPLITS:
        raise InvalidParameterError("split", split, f"must be 'all' or one of {list(MBPP_SPLITS)}")
    if not isinstance(shots, int) or isinstance(shots, bool) \
            or not 0 <= shots <= len(FEW_SHOT_IDS):
        raise InvalidParameterError("shots", shots,
                                    f"must be an integer in [0, {len(FEW_SHOT_IDS)}]")
    check_limit(limit)
    records = {r["task_id"]: r for r in read_jsonl(path, _record)}
    missing = [i for i in FEW_SHOT_IDS if i not in records]
    if missing:
        raise InvalidParameterError("path", str(path), f"lacks the few-shot tasks {missing}")
    prefix = "".join(_example(records[i], records[i]["code"]) for i in FEW_SHOT_IDS[:shots])
    examples = tuple((mbpp_question(records[i]["text"], records[i]["test_list"]),
                      code_block(records[i]["code"])) for i in FEW_SHOT_IDS[:shots])
    lo, hi = MBPP_SPLITS.get(split, (1, max(records)))
    chosen = [records[i] for i in sorted(records) if lo <= i <= hi][:limit]
    return [_problem(r, prefix, examples) for r in chosen]


def mbpp_question(text: str, asserts: Sequence[str]) -> str:
    """The task as the paper words it, without the persona or ``[BEGIN]``: ``{text} Your code
    should pass these tests:\\n\\n{asserts}`` (the chat form's question)."""
    return f"{text} Your code should pass these tests:\n\n" + "\n".join(asserts)


#: MBPP in chat form: EvalPlus's code instruction around :func:`mbpp_question`, the few-shot
#: examples (``shots``) as user/assistant turns answering in a python block.
MBPP_CHAT = code_chat(lambda p: mbpp_question(p.description, p.tests), lambda p: p.shots)


def mbpp_entry_point(asserts: list[str], code: str = "") -> str:
    """The function the asserts test: the first one they call that the reference ``code``
    defines at top level (the reference may shadow a builtin, e.g. ``sum``), else the first
    non-builtin one. ``ValueError`` when there is none (or an assert does not parse)."""
    called = [node.func.id for text in asserts for node in ast.walk(ast.parse(text))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    try:
        with warnings.catch_warnings():  # old references hold invalid escapes ("\d")
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(code)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in [c for c in called if c in defined] + [
            c for c in called if not hasattr(builtins, c)]:
        return name
    raise ValueError("the asserts call no function")


def _record(rec: dict[str, Any], lineno: int) -> dict[str, Any]:
    if not isinstance(rec["task_id"], int) or isinstance(rec["task_id"], bool):
        raise TypeError("task_id must be an integer")
    for key in ("text", "code", "test_setup_code"):
        if not isinstance(rec[key], str):
            raise TypeError(f"{key} must be a string")
    if not rec["test_list"] or not all(isinstance(t, str) for t in rec["test_list"]):
        raise TypeError("test_list must be a non-empty list of strings")
    rec["entry_point"] = mbpp_entry_point(rec["test_list"], rec["code"])
    return rec


def _example(rec: dict[str, Any], code: str | None) -> str:
    head = (f"You are an expert Python programmer, and here is your task: {rec['text']} "
            f"Your code should pass these tests:\n\n" + "\n".join(rec["test_list"])
            + "\n[BEGIN]\n")
    return head if code is None else f"{head}{code}\n{END_MARKER}\n"


def _problem(rec: dict[str, Any], shots: str,
             examples: tuple[tuple[str, str], ...] = ()) -> CodeProblem:
    setup = rec["test_setup_code"]
    return CodeProblem(
        task_id=f"mbpp/{rec['task_id']}", prompt=shots + _example(rec, None),
        entry_point=rec["entry_point"], tests=tuple(rec["test_list"]),
        setup=(setup,) if setup.strip() else (), end_marker=END_MARKER,
        reference=rec["code"], description=rec["text"], shots=examples)
