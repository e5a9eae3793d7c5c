"""The prompt of a refinement's next attempt (and of a self-refine critique), for text and chat
prompts.

- A **text** prompt is filled into a text template: ``{prompt}`` (the original prompt),
  ``{attempt}`` (the last attempt) and ``{feedback}`` (its feedback or critique).
- A **chat** prompt (a list of messages) is continued as a conversation, never flattened into a
  template: the attempt becomes the assistant's turn (appended to a final assistant message of
  the prompt, if it has one), the feedback the user's next turn, and the model then answers in a
  new assistant turn (its chat template's generation prompt). ``turn`` templates give the user
  turns' text. Only the last attempt is in the conversation, as only the last attempt is in a
  text template.

So for ``refine_with_feedback`` and ``treefinement`` the next prompt of a chat prompt ``M`` is
``M + [assistant: attempt, user: feedback_turn(feedback)]``; for ``self_refine`` the critique is
asked with ``M + [assistant: attempt, user: critique_turn]`` and the next attempt with
``M + [assistant: attempt, user: critique_turn, assistant: critique, user: refine_turn]``.
The original messages are never mutated.
"""

from __future__ import annotations

from collections.abc import Sequence

from metagen.errors import InvalidParameterError
from metagen.generators.base import ChatMessage, Prompt, with_answer

FEEDBACK_TEMPLATE = ("{prompt}{attempt}\n\nFeedback on the attempt above:\n{feedback}\n\n"
                     "Revised attempt:\n")
CRITIQUE_TEMPLATE = ("{prompt}{attempt}\n\nReview the attempt above step by step. If it is "
                     "correct, say NO ISSUES. Otherwise point out the mistake.\nReview:")
REFINE_TEMPLATE = ("{prompt}{attempt}\n\nReview:{feedback}\n\nUsing the review, write an "
                   "improved attempt.\nImproved attempt:\n")

#: A revision (Snell et al. 2024): the next attempt conditioned on the last one alone, no
#: feedback; a model trained on this format (the testbed's ``revise``) writes a corrected
#: solution after it.
REVISION_TEMPLATE = "{prompt}{attempt}\nRevision:\n"

FEEDBACK_TURN = "Feedback on your attempt:\n{feedback}\n\nWrite a revised attempt."
CRITIQUE_TURN = ("Review your attempt step by step. If it is correct, say NO ISSUES. Otherwise "
                 "point out the mistake.")
REFINE_TURN = "Using the review, write an improved attempt."


def check_turn(name: str, turn: object, *keys: str) -> None:
    """``InvalidParameterError`` naming ``name`` unless ``turn`` is a non-empty string holding
    every ``{key}``."""
    if not isinstance(turn, str) or not turn.strip():
        raise InvalidParameterError(name, turn, "must be a non-empty string")
    for key in keys:
        if "{" + key + "}" not in turn:
            raise InvalidParameterError(name, turn, f"must contain {{{key}}}")


def conversation(prompt: Sequence[ChatMessage], attempt: str, *turns: str
                 ) -> list[dict[str, str]]:
    """``prompt`` with ``attempt`` as the assistant's answer, then ``turns`` as user, assistant,
    user, ... messages (a copy; ``prompt`` is not mutated)."""
    messages = with_answer(prompt, attempt)
    for k, text in enumerate(turns):
        messages.append({"role": "user" if k % 2 == 0 else "assistant", "content": text})
    return messages


def feedback_prompt(prompt: Prompt, attempt: str, feedback: str, template: str,
                    turn: str) -> Prompt:
    """The next attempt's prompt after external feedback (see the module docstring)."""
    if isinstance(prompt, str):
        return template.format(prompt=prompt, attempt=attempt, feedback=feedback)
    return conversation(prompt, attempt, turn.format(feedback=feedback))


def revision_prompt(prompt: str, attempt: str, template: str = REVISION_TEMPLATE) -> str:
    """The prompt that asks for a revision of ``attempt`` (text prompts only)."""
    return template.format(prompt=prompt, attempt=attempt)


def critique_prompt(prompt: Prompt, attempt: str, template: str, turn: str) -> Prompt:
    """The prompt that asks the model to review its ``attempt``."""
    if isinstance(prompt, str):
        return template.format(prompt=prompt, attempt=attempt)
    return conversation(prompt, attempt, turn)


def refine_prompt(prompt: Prompt, attempt: str, critique: str, template: str,
                  critique_turn: str, refine_turn: str) -> Prompt:
    """The next attempt's prompt after the model's own ``critique`` of ``attempt``."""
    if isinstance(prompt, str):
        return template.format(prompt=prompt, attempt=attempt, feedback=critique)
    return conversation(prompt, attempt, critique_turn, critique, refine_turn)
