"""A task in chat form: how an instruct model is asked a benchmark's problem.

A :class:`ChatFormat` says what the conversation holds: an optional system message, the user
turn (``user``: a template in which ``{question}`` is replaced by the problem's text, so the
model family's usual instruction surrounds it), and few-shot examples as user/assistant turns
before the problem's own user turn. The model's chat template (applied by the generator
locally, or by the server behind ``/v1/chat/completions``) turns the messages into tokens:
nothing here knows a model's special tokens.

The instructions are those the model families are evaluated with:
:data:`MATH_COT_INSTRUCTION` is Qwen2.5-Math's chain-of-thought instruction (also DeepSeek-R1's
recommended one) for MATH-500 and GSM8K; :data:`CODE_INSTRUCTION` is EvalPlus's instruct
prompt for HumanEval and MBPP (a self-contained program in a markdown code block, which
:func:`~metagen.sandbox.code_problem.assemble_program` takes the first fenced block of).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

QUESTION = "{question}"  # replaced (literally, not str.format: LaTeX has braces) in ``user``

#: Qwen2.5-Math's CoT instruction for MATH and GSM8K (DeepSeek-R1 asks for the same).
MATH_COT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

#: EvalPlus's instruct-model prompt for HumanEval and MBPP.
CODE_INSTRUCTION = ("Please provide a self-contained Python script that solves the following "
                    "problem in a markdown code block:")


@dataclass(frozen=True, slots=True)
class ChatFormat:
    """One task's chat prompt. ``question(problem)`` is the problem's text, ``user`` the user
    turn's template (``{question}`` in it is replaced by that text), ``system`` the system
    message (None: none, the model's template chooses its default), ``shots(problem)`` the
    (question, answer) pairs of the few-shot examples, shown as user/assistant turns (each
    question through ``user`` too)."""

    question: Callable[[Any], str]
    user: str = QUESTION
    system: str | None = None
    shots: Callable[[Any], Sequence[tuple[str, str]]] = lambda problem: ()

    def messages(self, problem: Any) -> list[dict[str, str]]:
        """The conversation of ``problem``: the system message (if any), the examples' user and
        assistant turns, then the problem's user turn (the model answers next). Pure."""
        out = [{"role": "system", "content": self.system}] if self.system is not None else []
        for question, answer in self.shots(problem):
            out += [{"role": "user", "content": self.user_turn(question)},
                    {"role": "assistant", "content": answer}]
        return out + [{"role": "user", "content": self.user_turn(self.question(problem))}]

    def user_turn(self, question: str) -> str:
        """``user`` with ``{question}`` replaced by ``question``."""
        return self.user.replace(QUESTION, question)


def math_chat(question: Callable[[Any], str]) -> ChatFormat:
    """A math benchmark's chat form: the problem, then :data:`MATH_COT_INSTRUCTION`."""
    return ChatFormat(question, user=f"{QUESTION}\n{MATH_COT_INSTRUCTION}")


def code_block(code: str) -> str:
    """``code`` in a markdown python block (a code example's assistant turn)."""
    return f"```python\n{code.strip(chr(10))}\n```"


def code_chat(question: Callable[[Any], str],
              shots: Callable[[Any], Sequence[tuple[str, str]]] = lambda problem: ()
              ) -> ChatFormat:
    """A code benchmark's chat form: :data:`CODE_INSTRUCTION`, then the problem in a markdown
    block (EvalPlus's instruct prompt); examples answer with :func:`code_block`."""
    return ChatFormat(question, user=f"{CODE_INSTRUCTION}\n```\n{QUESTION}\n```", shots=shots)
