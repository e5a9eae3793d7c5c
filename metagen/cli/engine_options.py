"""The engine options of ``metagen generate`` and ``metagen serve``: one table, both commands.

Each :class:`EngineOption` names an :class:`~metagen.engine.config.EngineConfig` field; its flag
is the field's name with dashes (``kv_window_tokens`` -> ``--kv-window-tokens``) and its help
the field's contract in a line (the full one is ``EngineConfig``'s docstring). Values go to
``EngineConfig`` as typed: an integer flag that is not an integer is an
:class:`~metagen.errors.InvalidParameterError` naming the field (:mod:`metagen.cli.flags`), and
every other check is ``EngineConfig``'s own, made by :func:`check_engine_options` before any
model loads -- so ``--kv-window-tokens 7`` fails with the same typed error naming
``kv_window_tokens`` as ``EngineConfig(kv_window_tokens=7)`` does in Python, which
``metagen.cli.main`` prints as one line with exit status 2.

A choice's values (``int8|w8a8|int4``, ``auto|int8``) are the config module's constants, read
when the help is shown: importing the engine imports torch, which a command's ``--help`` and its
sampling-flag errors do not need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import click

from metagen.cli.flags import int_flag, parse_ns

Kind = Literal["int", "ints", "path", "choice", "flag"]


@dataclass(frozen=True, slots=True)
class EngineOption:
    """One ``EngineConfig`` field exposed as a flag: ``kind`` says how its text is read (``int``
    by :func:`~metagen.cli.flags.int_flag`, ``ints`` comma-separated by
    :func:`~metagen.cli.flags.parse_ns`, ``path`` and ``choice`` as given, ``flag`` True when
    present); ``vocabulary`` names the constant of :mod:`metagen.engine.config` listing a
    choice's values."""

    name: str
    kind: Kind
    help: str
    vocabulary: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


ENGINE_OPTIONS: tuple[EngineOption, ...] = (
    EngineOption("num_blocks", "int", "KV cache blocks of 16 tokens (default: a 64 MiB "
                 "budget)."),
    EngineOption("max_num_seqs", "int", "Sequences in the running batch (default 256)."),
    EngineOption("quantization", "choice", "Quantize the weights at load: int8 (weight-only, "
                 "per-channel scales), w8a8 (also each product's activations, per block of 32), "
                 "int4 (a scale per channel and block of 32 inputs, int8 activations, the LM "
                 "head in w8a8) or int4-all (the LM head in int4 too).", "QUANTIZATIONS"),
    EngineOption("deterministic", "flag", "Batch-invariant engine steps: seeded samples the "
                 "same bits whatever the prefix cache holds, the batch and the thread count "
                 "(float32, no speculative decoding)."),
    EngineOption("kv_cache_dtype", "choice", "The KV cache's element type: auto (the model's "
                 "dtype) or int8 (a float32 scale per layer, block and kv head: about 4x the "
                 "tokens in the same bytes).", "KV_CACHE_DTYPES"),
    EngineOption("kv_window_tokens", "int", "Token dropping (StreamingLLM): each sequence keeps "
                 "its most recent INT tokens (a multiple of the block size, 16) and its sink "
                 "tokens, and releases the blocks in between; not with speculative decoding."),
    EngineOption("kv_sink_tokens", "int", "With --kv-window-tokens: also keep each sequence's "
                 "first INT tokens (rounded up to whole blocks)."),
    EngineOption("speculative_model", "path", "Speculative decoding with this draft model "
                 "folder (same vocabulary): greedy output is plain greedy's, sampled output "
                 "has the target's distribution."),
    EngineOption("num_speculative_tokens", "int", "Draft tokens per step, 1 to 64 (default 4)."),
    EngineOption("speculative_quantization", "choice", "Quantize the draft model's weights at "
                 "load: cheaper drafts, the same output (the target verifies them in its own "
                 "precision).", "QUANTIZATIONS"),
    EngineOption("speculative_tree", "ints", "Draft a token tree: this many candidates beside "
                 "the draft at each depth, comma-separated (2,1: two beside the first draft, "
                 "one beside the second), verified in the same step (with "
                 "--speculative-model)."),
    EngineOption("prompt_lookup", "int", "Speculative decoding by prompt lookup with n-grams of "
                 "up to INT tokens (instead of --speculative-model)."),
    EngineOption("adaptive_speculation", "flag", "Each row drafts as many tokens (at most "
                 "--num-speculative-tokens) as pays for its running acceptance rate, none "
                 "where no draft pays (probing with one every few steps)."),
)
ENGINE_OPTION_NAMES: tuple[str, ...] = tuple(o.name for o in ENGINE_OPTIONS)


class _ChoiceOption(click.Option):
    """A click option whose metavar lists :mod:`metagen.engine.config`'s constant ``vocabulary``,
    imported only when the help is rendered."""

    def __init__(self, *args: Any, vocabulary: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vocabulary = vocabulary

    def make_metavar(self, ctx: click.Context | None = None) -> str:
        from metagen.engine import config

        return "|".join(getattr(config, self.vocabulary))


def engine_flag(name: str) -> Callable[[Any], Any]:
    """The click option of the table's entry ``name`` (a value that is not given is None)."""
    option = next(o for o in ENGINE_OPTIONS if o.name == name)
    if option.kind == "flag":
        return click.option(option.flag, option.name, is_flag=True, default=None,
                            help=option.help)
    if option.kind == "choice":
        return click.option(option.flag, option.name, default=None, help=option.help,
                            cls=_ChoiceOption, vocabulary=option.vocabulary)
    metavar = {"int": "INT", "ints": "INT,INT,..."}.get(option.kind, "PATH")
    return click.option(option.flag, option.name, type=str, default=None, metavar=metavar,
                        help=option.help)


def engine_flags(f: Any) -> Any:
    """Decorate a click command with every flag of :data:`ENGINE_OPTIONS` (its kwargs:
    :data:`ENGINE_OPTION_NAMES`)."""
    for option in reversed(ENGINE_OPTIONS):
        f = engine_flag(option.name)(f)
    return f


def pop_engine_options(flags: dict[str, Any]) -> dict[str, Any]:
    """Take the table's flags out of a command's ``**flags``: field -> value, None where not
    given; integer flags parsed (a malformed one is an ``InvalidParameterError`` naming its
    field), the rest as given."""
    kinds = {o.name: o.kind for o in ENGINE_OPTIONS}
    values = {name: flags.pop(name) for name in ENGINE_OPTION_NAMES}
    return {name: int_flag(name, value) if kinds[name] == "int" else
            parse_ns(value, name) if kinds[name] == "ints" and value is not None else value
            for name, value in values.items()}


def given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that were given (not None)."""
    return {name: value for name, value in options.items() if value is not None}


def check_engine_options(options: Mapping[str, Any]) -> Any:
    """``EngineConfig(**given(options))``: the engine's own validation, before any model loads
    (an :class:`~metagen.errors.InvalidParameterError` naming the field, or the error of a
    device that is not there). ``options`` may hold other ``EngineConfig`` fields too
    (``device``, ``dtype``)."""
    from metagen.engine.config import EngineConfig

    return EngineConfig(**given(options))


def engine_report(config: Any) -> dict[str, Any]:
    """The table's fields of a loaded engine's ``EngineConfig`` (what ran, for ``--json``)."""
    return {name: getattr(config, name) for name in ENGINE_OPTION_NAMES}
