"""Equivalence of LaTeX math answers with ``math-verify`` (optional package, extra ``math``).

:class:`MathEquivalence` is the ``match`` of MATH answers: ``eq(a, b)`` is True when the two
answer strings (boxed contents, e.g. ``"\\frac{1}{2}"`` and ``"0.5"``) have the same
:func:`canonical_answer`, else when math-verify's ``verify`` holds in either direction
(``verify`` is asymmetric: gold first). :meth:`MathEquivalence.gold_matches` is the grader's
one-directional check, gold first, as math-verify prescribes.

Not an equivalence relation in general: math-verify accepts ``50\\%`` as both ``50`` and
``0.5``, which differ. Voting groups an answer with the first class whose representative
matches (see :func:`metagen.answers.key.group_by_canonical`).

Timeouts (one call cannot stall a vote): every parse and every ``verify`` is bounded by
``timeout_s`` seconds (an int, >= 1). In the main thread on POSIX, math-verify's own
``signal.alarm`` interrupts the computation. Elsewhere (a worker thread: signals only work in
the main thread) the call runs in a daemon thread that is abandoned after ``timeout_s``; it may
keep using CPU until it finishes, but the caller goes on. A parse that times out or fails
leaves the answer comparable by its canonical text only; a ``verify`` that times out is
"not equivalent". Parses are cached (LRU, keyed by the text), so a pathological answer costs
one timeout per process, not one per comparison. A vote's worst case is therefore one parse
timeout per distinct answer plus two ``verify`` timeouts per comparison of a new canonical form
with a class representative (see :func:`metagen.answers.key.group_by_canonical`).

In the main thread the alarm replaces any ``SIGALRM`` timer the caller had set (math-verify
cancels it when its own call ends). Off the main thread math-verify logs once that its own
timeout is disabled: the bound is this module's.

Cost measured on MATH-500's gold answers (one 2-core machine): about 2.5 ms per uncached
parse, 0.03 ms per ``verify``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from metagen.errors import CapabilityError, InvalidParameterError

T = TypeVar("T")

_SPACING = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!,;: ]|\s+")
_FRAC = re.compile(r"\\[dt]frac(?![A-Za-z])")


def canonical_answer(answer: str) -> str:
    """A normal form that only drops what never changes a value: whitespace, ``\\left`` /
    ``\\right``, spacing commands, surrounding ``$`` and a trailing period; ``\\dfrac`` and
    ``\\tfrac`` become ``\\frac``. Equal canonical forms are equivalent answers (the converse
    does not hold: ``0.5`` and ``\\frac{1}{2}`` differ here)."""
    if not isinstance(answer, str):
        raise InvalidParameterError("answer", answer, "must be a str")
    text = _FRAC.sub(r"\\frac", _SPACING.sub("", answer))
    text = text.strip("$")
    return text[:-1] if text.endswith(".") else text


def _math_verify() -> Any:
    try:
        import math_verify
        import math_verify.errors
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise CapabilityError("MATH answer equivalence needs math-verify: "
                              "pip install 'metagen[math]'") from exc
    return math_verify


def _bounded(call: Callable[[int | None], T], timeout_s: int, default: T) -> T:
    """``call(timeout)`` within ``timeout_s`` seconds; ``default`` on a timeout or an error.

    Main thread on POSIX: math-verify's signal alarm (``call(timeout_s)``). Elsewhere:
    ``call(None)`` in a daemon thread, abandoned after ``timeout_s``.
    """
    if os.name == "posix" and threading.current_thread() is threading.main_thread():
        timed_out = _math_verify().errors.TimeoutException  # a BaseException, not an Exception
        try:
            return call(timeout_s)
        except (Exception, timed_out):
            return default
    box: list[T] = []

    def run() -> None:
        try:
            box.append(call(None))
        except Exception:
            pass

    worker = threading.Thread(target=run, name="math-verify", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return box[0] if box else default


@lru_cache(maxsize=8192)
def _parse(answer: str, timeout_s: int) -> tuple[Any, ...]:
    """math-verify's parse of one answer written as a boxed expression; () if unparsable."""
    mv = _math_verify()
    text = "\\boxed{" + answer + "}"
    parsed: list[Any] = _bounded(lambda t: mv.parse(text, parsing_timeout=t), timeout_s, [])
    return tuple(parsed)


class MathEquivalence:
    """``match(a, b)`` for MATH answers (see the module contract). ``timeout_s``: the bound,
    in whole seconds (math-verify's alarm has one-second resolution), of one parse or one
    ``verify`` call."""

    __slots__ = ("timeout_s",)

    def __init__(self, timeout_s: int = 2) -> None:
        if not isinstance(timeout_s, int) or isinstance(timeout_s, bool) or timeout_s < 1:
            raise InvalidParameterError("timeout_s", timeout_s, "must be an int >= 1 (seconds)")
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"MathEquivalence(timeout_s={self.timeout_s})"

    def parse(self, answer: str) -> tuple[Any, ...]:
        """math-verify's parsed forms of ``answer`` (cached); ``()`` when it cannot parse."""
        if not isinstance(answer, str):
            raise InvalidParameterError("answer", answer, "must be a str")
        return _parse(answer, self.timeout_s)

    def _verify(self, gold: tuple[Any, ...], pred: tuple[Any, ...]) -> bool:
        if not gold or not pred:
            return False
        mv = _math_verify()
        return bool(_bounded(lambda t: mv.verify(list(gold), list(pred), timeout_seconds=t),
                             self.timeout_s, False))

    def gold_matches(self, gold: str, pred: str | None) -> bool:
        """Whether ``pred`` is a correct answer for ``gold`` (the grader's direction)."""
        if pred is None:
            return False
        if canonical_answer(gold) == canonical_answer(pred):
            return True
        return self._verify(self.parse(gold), self.parse(pred))

    def __call__(self, a: Any, b: Any) -> bool:
        """Symmetric match of two answers; ``None`` (no answer) matches nothing."""
        if not isinstance(a, str) or not isinstance(b, str):
            return False
        if canonical_answer(a) == canonical_answer(b):
            return True
        pa, pb = self.parse(a), self.parse(b)
        return self._verify(pa, pb) or self._verify(pb, pa)
