"""Compiled constraints: a per-tokenizer grammar compiler with an LRU, and the per-sequence matcher.

:class:`GrammarCompiler` wraps one Hugging Face tokenizer for llguidance (about 1 s for a large
vocabulary, done once per backend) and compiles each request's constraint once per grammar text
(an LRU of ``cache_size`` templates); :meth:`GrammarCompiler.matcher` hands every request a fresh
:class:`GrammarMatcher` copied from the template. Compiling rejects, naming the field, what the
tokenizer-free syntax check cannot see: a language without any string (``[^\\s\\S]``), a Lark
regex terminal matching no string, a JSON schema whose ``$ref`` loops, a grammar llguidance cannot
build (V19).

:class:`GrammarMatcher` follows a sequence's output lazily: :meth:`GrammarMatcher.sync` brings it
to any ``output_ids`` by rolling back to the common prefix and consuming the rest, so a fork
(``copy``), a truncation, a driver's ``extend`` and rejected speculative tokens need no separate
hooks. Tokens the grammar refuses are not consumed: the matcher then reports ``live=False`` and
its mask allows only EOS.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol

import torch

from metagen.constraints import grammar_text, require_llguidance
from metagen.deep_stack import on_deep_stack
from metagen.empty_language import lark_regexes
from metagen.errors import InvalidParameterError


class Constrained(Protocol):
    """Request parameters that may carry an output constraint (SamplingParams,
    BeamSearchParams)."""

    @property
    def constraint(self) -> tuple[str, Any] | None: ...


class GrammarMatcher:
    """llguidance matcher of one sequence, synced to its output ids on demand."""

    __slots__ = ("_m", "_consumed", "_llg_torch")

    def __init__(self, matcher: Any, llg_torch: Any) -> None:
        self._m = matcher
        self._consumed: list[int] = []
        self._llg_torch = llg_torch

    def copy(self) -> GrammarMatcher:
        """An independent matcher in the same state (for a forked sequence)."""
        out = GrammarMatcher(self._m.deep_copy(), self._llg_torch)
        out._consumed = list(self._consumed)
        return out

    def sync(self, output_ids: list[int]) -> bool:
        """Bring the matcher to ``output_ids``; False when the grammar refuses one of them (the
        matcher then stands after the longest accepted prefix)."""
        done = self._consumed
        n = len(done)
        if n > len(output_ids) or output_ids[:n] != done:
            keep = 0
            for a, b in zip(done, output_ids):
                if a != b:
                    break
                keep += 1
            if not self._m.rollback(n - keep):
                self._m.reset()
                keep = 0
            del done[keep:]
            n = keep
        if n == len(output_ids):
            return True
        todo = output_ids[n:]
        took = int(self._m.try_consume_tokens(todo))
        done.extend(todo[:took])
        return took == len(todo)

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-next-token bits into ``bitmask[row]`` (int32, CPU)."""
        self._llg_torch.fill_next_token_bitmask(self._m, bitmask, row)

    @property
    def accepting(self) -> bool:
        """The output so far is a complete string of the language."""
        return bool(self._m.is_accepting())


class GrammarCompiler:
    """Compiles constraints for one tokenizer; templates kept in an LRU of ``cache_size``.

    ``vocab_size`` is the model's logit width (at least the tokenizer's); ``eos_token_ids`` the
    model's end tokens, all allowed exactly where the language accepts."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: tuple[int, ...],
                 cache_size: int = 64) -> None:
        llg = require_llguidance()
        import llguidance.hf
        import llguidance.torch
        self._llg, self._llg_torch = llg, llguidance.torch
        eos = list(eos_token_ids) or None
        n_vocab = max(int(vocab_size), len(tokenizer))
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=n_vocab, eos_token=eos)
        self.vocab_size = n_vocab
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Any] = OrderedDict()

    def matcher(self, constraint: tuple[str, Any]) -> GrammarMatcher:
        """A fresh matcher for ``constraint`` (``SamplingParams.constraint``); raises
        :class:`InvalidParameterError` naming the field when it cannot be compiled for this
        tokenizer or its language has no string."""
        return GrammarMatcher(self.template(constraint).deep_copy(), self._llg_torch)

    def template(self, constraint: tuple[str, Any]) -> Any:
        """The compiled llguidance matcher of ``constraint`` in its initial state (cached; do
        not advance it). Raises as :meth:`matcher`."""
        name, value = constraint
        grammar = grammar_text(name, value)
        template = self._cache.get(grammar)
        if template is None:
            template = self._compile(name, value, grammar)
            self._cache[grammar] = template
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(grammar)
        return template

    def _compile(self, name: str, value: Any, grammar: str) -> Any:
        m = on_deep_stack(self._build, grammar)  # recursive in llguidance: see deep_stack
        if m.is_error():
            reason = m.get_error().strip().splitlines()[0][:300] if m.get_error() else "error"
            raise InvalidParameterError(name, value, f"cannot be compiled, or its language has "
                                        f"no string: {reason}")
        if name == "grammar":
            self._check_regexes(value)
        return m

    def _check_regexes(self, grammar: str) -> None:
        """Refuse Lark ``grammar`` when one of its regex terminals matches no string: a branch
        through it is a dead end that llguidance's masks do not foresee (after ``"a"`` in
        ``start: "a" /[^\\s\\S]/`` only EOS is left, ending a non-string as if complete)."""
        for regex in lark_regexes(grammar):
            probe = on_deep_stack(self._build, self._llg.grammar_from("lark", f"start: {regex}"))
            if probe.is_error() and "NoExtension" in (probe.get_error() or ""):
                raise InvalidParameterError("grammar", grammar, f"its terminal {regex[:200]} "
                                            "matches no string (a dead end mid-generation)")

    def _build(self, grammar: str) -> Any:
        m = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if not m.is_error():  # the first mask finds an empty language and $ref loops
            probe = self._llg_torch.allocate_token_bitmask(1, self.vocab_size)
            self._llg_torch.fill_next_token_bitmask(m, probe, 0)
        return m

    @property
    def cached(self) -> int:
        """Number of compiled templates in the LRU."""
        return len(self._cache)


class ConstraintSource:
    """A backend's constraints: builds its :class:`GrammarCompiler` on the first constrained
    request (llguidance is imported only then), and a matcher per request."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: tuple[int, ...],
                 cache_size: int = 64) -> None:
        self._args = (tokenizer, vocab_size, eos_token_ids, cache_size)
        self._compiler: GrammarCompiler | None = None

    @property
    def compiler(self) -> GrammarCompiler:
        """The compiler (built on first use; :class:`CapabilityError` without llguidance)."""
        if self._compiler is None:
            self._compiler = GrammarCompiler(*self._args)
        return self._compiler

    def check(self, params: Constrained) -> None:
        """Compile ``params.constraint`` now (cached), raising as :meth:`matcher` does."""
        if params.constraint is not None:
            self.matcher(params)

    def matcher(self, params: Constrained) -> GrammarMatcher | None:
        """A fresh matcher for ``params.constraint`` (``None`` when unconstrained). Raises
        :class:`InvalidParameterError` naming the field when the backend has no tokenizer or the
        constraint does not compile."""
        constraint = params.constraint
        if constraint is None:
            return None
        if self._args[0] is None:
            raise InvalidParameterError(constraint[0], constraint[1],
                                        "constrained decoding needs the model's tokenizer")
        return self.compiler.matcher(constraint)
