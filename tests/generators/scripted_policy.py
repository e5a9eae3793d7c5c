"""A scripted policy behind :class:`FaultServer`, answering as vLLM does, for running strategies
on :class:`OpenAIGenerator` over real HTTP.

:class:`ScriptedPolicy` is a ``FaultServer`` plan: for each ``/completions`` request it asks
``script(prompt, seed)`` for the whole rest of a solution and cuts it like vLLM: at the first of
the request's ``stop`` strings (excluded from the text, ``finish_reason="stop"``,
``stop_reason`` = that string), else after ``max_tokens`` words (``"length"``), else at the end
(EOS: ``"stop"``, ``stop_reason`` None). One token = one word; ``usage`` counts the words of the
prompt and of the returned text. Every answer it sends is recorded (:attr:`served`), so a test can
compare a strategy's ``Result.usage`` with what the server reported. ``fail(body)`` True makes a
request a scripted HTTP 500 (retried by the client like any server error). Echo requests
(``score``) get the FaultServer's prompt-only echo.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .fault_server import Fault, Seen, ok_body

Script = Callable[[str, int], str]


@dataclass(frozen=True)
class Served:
    """One answer the server sent: the request body, the text, and its usage counts."""

    body: dict[str, Any]
    text: str
    prompt_tokens: int
    completion_tokens: int


def cut(text: str, stops: list[str], max_tokens: int) -> tuple[str, str, str | None]:
    """(text, finish_reason, stop_reason) of a continuation as vLLM returns it."""
    hits = [(text.find(s), s) for s in stops if s in text]
    if hits:
        at, stop = min(hits)
        text, finish, reason = text[:at], "stop", stop
    else:
        finish, reason = "stop", None
    words = text.split()
    if len(words) > max_tokens:
        return " ".join(words[:max_tokens]), "length", None
    return text, finish, reason


class ScriptedPolicy:
    """See the module docstring."""

    def __init__(self, script: Script, fail: Callable[[dict[str, Any]], bool] | None = None
                 ) -> None:
        self.script = script
        self.fail = fail or (lambda body: False)
        self.served: list[Served] = []
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Fault:
        body = seen.body
        if body.get("echo"):
            return Fault()
        if self.fail(body):
            return Fault("status", 500)
        prompt = body["prompt"]
        text, finish, reason = cut(self.script(prompt, body.get("seed") or 0),
                                   list(body.get("stop") or ()), body["max_tokens"])
        answer = ok_body(body, text)
        answer["choices"][0].update(finish_reason=finish, stop_reason=reason)
        usage = answer["usage"]
        with self._lock:
            self.served.append(Served(body, text, usage["prompt_tokens"],
                                      usage["completion_tokens"]))
        return Fault("json", body=answer)

    def generated_tokens(self) -> int:
        """The sum of ``completion_tokens`` over every answer sent."""
        return sum(s.completion_tokens for s in self.served)

    def prompts(self) -> list[str]:
        """The prompts of the answered requests, in arrival order."""
        return [s.body["prompt"] for s in self.served]
