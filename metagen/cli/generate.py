"""``metagen generate MODEL PROMPT``: sample completions from a model folder; or
``metagen generate --base-url URL --model NAME PROMPT``: from the model NAME that an
OpenAI-compatible server at URL serves (backend ``openai``; see :mod:`metagen.cli.remote`).

Every decoding option of :class:`~metagen.types.SamplingParams` has a flag named after its field
(``--top-p`` is ``top_p``; ``--logit-bias``, ``--bad-words``, ``--stop-token-ids`` and
``--choice`` repeat; the output constraints ``--regex``, ``--json-schema``, ``--grammar``,
``--choice`` and ``--token-healing``: :mod:`metagen.cli.constraint_flags`). Flag values go to
``SamplingParams`` unchanged, so a bad value (``--top-p 1.5``) fails with the same typed error as
in Python, which ``metagen.cli.main`` prints as one line (exit status 2) -- before any model is
loaded. The engine options (``--kv-cache-dtype``, ``--kv-window-tokens``, speculative decoding,
``--quantization`` ...: :mod:`metagen.cli.engine_options`, the table ``metagen serve`` takes too)
are ``EngineConfig`` fields, checked by ``EngineConfig`` itself before loading; they run on the
built-in engine (``--backend auto`` becomes ``local``; ``hf`` and ``--base-url`` refuse them,
naming the flag). ``--num-beams`` runs beam search (``BeamSearchGenerator``; ``--stochastic``:
stochastic beam search, seeded by ``--seed``). A model that cannot be loaded (missing, corrupt,
inconsistent with its config, or a device that is not there) is also one line and exit status 2.

Output: the prompt and its completion (``--stream``: as it is generated), or with ``--json`` one
JSON object::

    {"model": str, "backend": str, "prompt": str, "params": {...SamplingParams.to_dict()},
     "completions": [{"text", "token_ids", "logprobs", "cumulative_logprob", "finish_reason",
                      "stop_reason", "top_logprobs"}, ...],
     "usage": {...Usage.to_dict()}}

FLOPs that are unknown (a server whose parameter count is not known) are ``null`` there. With
``--num-beams`` a ``"beam"`` key holds the ``BeamSearchParams``; with an engine option an
``"engine"`` key the loaded engine's values of every option of the table.

A completion that failed (``finish_reason`` "error", e.g. its logits turned NaN, or one sample of
several that a server failed) is reported on stderr as ``error: completion I failed (REASON)``
(on a server ``REASON: the server's error``, e.g. ``server_error: HTTP 500: EngineCore
encountered an issue...``) and the exit status is 1. On a server, a flag the server cannot honour is the generator's
``CapabilityError`` naming it, before any completion is requested; a call whose every sample
failed (server down, an HTTP error, a model name the server does not serve: 404) is one line
naming the URL and exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import click

from metagen.cli.constraint_flags import constraint_flags, constraint_values
from metagen.cli.engine_options import (
    check_engine_options,
    engine_flag,
    engine_flags,
    engine_report,
    given,
    pop_engine_options,
)
from metagen.cli.flags import float_flag as _float
from metagen.cli.flags import int_flag as _int
from metagen.cli.flags import option_group
from metagen.cli.remote import (
    naming_url,
    open_remote,
    pop_remote,
    quiet_remote_logs,
    raise_if_all_failed,
    refuse_local_only,
    remote_options,
)
from metagen.cli.strategy_flags import pop_strategy, run_strategy, strategy_flags
from metagen.errors import CapabilityError, InvalidParameterError, NumericalError
from metagen.generators.loading import available_backends, backend_class, engine_backend
from metagen.generators.loading import load_generator as load
from metagen.types import Completion, SamplingParams, Usage

REMOTE_BACKEND = "openai"  # --base-url URL --model NAME: an OpenAI-compatible server

_FLOAT_FLAGS = ("temperature", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
                "mirostat_tau", "mirostat_eta", "repetition_penalty", "presence_penalty",
                "frequency_penalty")
_INT_FLAGS = ("n", "top_k", "no_repeat_ngram_size", "max_tokens", "min_tokens", "seed",
              "logprobs")


def load_generator(backend: str, model: str, **options: Any) -> tuple[str, Any]:
    """:func:`metagen.generators.loading.load_generator`, its notes printed on stderr."""
    return load(backend, model, note=lambda text: click.echo(text, err=True), **options)


def _logit_bias(entries: Sequence[str]) -> dict[int, float] | None:
    """``TOKEN_ID=BIAS`` entries as a dict (None when there are none); the values themselves are
    checked by ``SamplingParams``."""
    if not entries:
        return None
    bias: dict[int, float] = {}
    for entry in entries:
        token, _, value = entry.partition("=")
        try:
            tok, number = int(token), float(value)
        except ValueError:
            raise InvalidParameterError("logit_bias", entry, "must be TOKEN_ID=BIAS with an "
                                        "integer id and a number, e.g. 2=-100") from None
        if tok in bias:
            raise InvalidParameterError("logit_bias", entry, f"token id {tok} is given twice")
        bias[tok] = number
    return bias


def _token_ids(name: str, texts: Sequence[str]) -> tuple[int, ...]:
    """A repeated flag's token ids; a malformed one is an ``InvalidParameterError`` naming it."""
    ids = []
    for text in texts:
        try:
            ids.append(int(text))
        except ValueError:
            raise InvalidParameterError(name, text, "must be an integer token id") from None
    return tuple(ids)


def sampling_params(flags: dict[str, Any]) -> SamplingParams:
    """The :class:`SamplingParams` of the command's sampling flags (strings as typed)."""
    values: dict[str, Any] = {name: _float(name, flags[name]) for name in _FLOAT_FLAGS}
    values.update({name: _int(name, flags[name]) for name in _INT_FLAGS})
    values["logit_bias"] = _logit_bias(flags["logit_bias"])
    values["stop_token_ids"] = _token_ids("stop_token_ids", flags["stop_token_ids"])
    values.update(constraint_values(flags))
    return SamplingParams(**values, stop=flags["stop"], bad_words=flags["bad_words"],
                          ignore_eos=flags["ignore_eos"])


def _check_stream(backend: str, params: SamplingParams, as_json: bool) -> None:
    """Raise ``InvalidParameterError`` naming ``stream`` when ``--stream`` cannot be honoured:
    with ``--json``, with ``--n`` > 1, or on a named backend without ``stream``."""
    if as_json:
        raise InvalidParameterError("stream", True, "prints text as it comes; it cannot be "
                                    "combined with --json")
    if params.n != 1:
        raise InvalidParameterError("stream", True, f"streams one completion; got --n {params.n}")
    if backend in available_backends():
        _check_can_stream(backend, backend_class(backend))


def _check_can_stream(name: str, generator: Any) -> None:
    if not callable(getattr(generator, "stream", None)):
        raise InvalidParameterError("stream", True, f"the {name} backend cannot stream; drop "
                                    "--stream or use --backend local")


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No progress bars, transformers log lines or Python warnings while a model loads: the CLI
    prints results, or one line when loading fails."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _report_failures(completions: Sequence[Completion],
                     errors: Sequence[Exception | None] = ()) -> bool:
    """Say on stderr which completions failed (with the server's error when ``errors`` has
    one at that index); whether any did."""
    failed = [i for i, c in enumerate(completions) if c.finish_reason == "error"]
    for i in failed:
        error = errors[i] if i < len(errors) else None
        reason = f"{completions[i].stop_reason}: {error}" if error is not None \
            else completions[i].stop_reason
        click.echo(f"error: completion {i} failed ({reason})", err=True)
    return bool(failed)


def _print_text(prompt: str, completions: Sequence[Completion]) -> None:
    """Each completion that did not fail as prompt + text (with a header line when n > 1)."""
    for i, comp in enumerate(completions):
        if comp.finish_reason == "error":
            continue
        if len(completions) > 1:
            click.echo(f"--- completion {i} ({comp.finish_reason}, "
                       f"{comp.num_tokens} tokens)")
        click.echo(prompt + comp.text)


def _stream(gen: Any, prompt: str, params: SamplingParams) -> bool:
    """Print the prompt, then the completion's text as it is generated; whether it failed
    (numerical error, reported on stderr like a failed completion). The prompt is printed with
    the first delta, so a stream that fails before it (a server that cannot be reached) prints
    nothing on stdout."""
    shown = False
    try:
        for delta in gen.stream(prompt, params):
            if not shown:
                click.echo(prompt, nl=False)
                shown = True
            click.echo(delta, nl=False)
    except NumericalError:
        click.echo(prompt if not shown else "")
        click.echo("error: completion 0 failed (numerical_error)", err=True)
        return True
    click.echo(prompt if not shown else "")
    return False


# -- beam search flags (one block; the command takes them as **search) --
_SEARCH_FLAGS = [
    click.option("--num-beams", type=str, metavar="INT", default=None,
                 help="Beam search with this many beams; --n hypotheses are returned, best "
                 "first (cumulative_logprob = the beam score)."),
    click.option("--num-beam-groups", type=str, metavar="INT", default=None,
                 help="Diverse beam search: groups (divides --num-beams)."),
    click.option("--diversity-penalty", type=str, metavar="FLOAT", default=None,
                 help="Diverse beam search: penalty per earlier group's use of a token."),
    click.option("--length-penalty", type=str, metavar="FLOAT", default=None,
                 help="Beam score = logprob / length ** this (default 1.0)."),
    click.option("--stochastic", is_flag=True, default=None,
                 help="Stochastic beam search: --num-beams sequences sampled without "
                 "replacement (Gumbel-top-k), reproducible with --seed; one group."),
]


_SEARCH_NAMES = ("num_beams", "num_beam_groups", "diversity_penalty", "length_penalty",
                 "stochastic")


_search_flags = option_group(_SEARCH_FLAGS)


def _beam_params(search: dict[str, Any]) -> Any:
    """The ``BeamSearchParams`` template of ``--num-beams ...`` (None without it), validated."""
    from metagen.beam_params import BeamSearchParams

    if search["num_beams"] is None:
        for name in ("num_beam_groups", "diversity_penalty", "length_penalty", "stochastic"):
            if search[name] is not None:
                raise InvalidParameterError(name, search[name], "needs --num-beams")
        return None
    beams = _int("num_beams", search["num_beams"])
    assert beams is not None  # the flag was given
    groups = _int("num_beam_groups", search["num_beam_groups"])
    diversity = _float("diversity_penalty", search["diversity_penalty"])
    length = _float("length_penalty", search["length_penalty"])
    return BeamSearchParams(
        num_beams=beams,
        num_beam_groups=1 if groups is None else groups,
        diversity_penalty=0.0 if diversity is None else diversity,
        length_penalty=1.0 if length is None else length,
        stochastic=bool(search["stochastic"]))


QUANTIZATION_FLAG = engine_flag("quantization")  # metagen eval's --quantization too


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("args", nargs=-1, metavar="[MODEL] PROMPT")
@click.option("--backend", default="auto", show_default=True,
              help="local (the built-in engine), hf (transformers: any architecture), auto "
              "(local when it implements the architecture, else hf), or openai (implied by "
              "--base-url).")
@click.option("--n", "n", type=str, metavar="INT", default=1, show_default=True,
              help="Completions to sample.")
@click.option("--temperature", type=str, metavar="FLOAT", default=1.0, show_default=True,
              help="0 is greedy.")
@click.option("--top-p", type=str, metavar="FLOAT", default=1.0, show_default=True)
@click.option("--top-k", type=str, metavar="INT", default=0, show_default=True,
              help="0 or -1 disables.")
@click.option("--min-p", type=str, metavar="FLOAT", default=0.0, show_default=True)
@click.option("--typical-p", type=str, metavar="FLOAT", default=1.0, show_default=True)
@click.option("--epsilon-cutoff", type=str, metavar="FLOAT", default=0.0, show_default=True,
              help="Drop tokens below this probability; 0 disables.")
@click.option("--eta-cutoff", type=str, metavar="FLOAT", default=0.0, show_default=True,
              help="Eta sampling's cutoff; 0 disables.")
@click.option("--mirostat-tau", type=str, metavar="FLOAT", default=None,
              help="Mirostat v2 target surprise (nats); replaces the truncation samplers.")
@click.option("--mirostat-eta", type=str, metavar="FLOAT", default=0.1, show_default=True,
              help="Mirostat learning rate.")
@click.option("--repetition-penalty", type=str, metavar="FLOAT", default=1.0, show_default=True)
@click.option("--presence-penalty", type=str, metavar="FLOAT", default=0.0, show_default=True)
@click.option("--frequency-penalty", type=str, metavar="FLOAT", default=0.0, show_default=True)
@click.option("--no-repeat-ngram-size", type=str, metavar="INT", default=0, show_default=True,
              help="Never repeat an n-gram of this size; 0 disables.")
@click.option("--logit-bias", multiple=True, metavar="TOKEN_ID=BIAS",
              help="Add BIAS to a token's logit (repeatable).")
@click.option("--bad-words", multiple=True, metavar="TEXT",
              help="Text the output may never contain, however it is tokenized, case-sensitive, "
              "also inside longer words; the prompt does not count (repeatable).")
@click.option("--max-tokens", type=str, metavar="INT", default=64, show_default=True)
@click.option("--min-tokens", type=str, metavar="INT", default=0, show_default=True)
@click.option("--stop", multiple=True, help="Stop string (repeatable); not included in the text.")
@click.option("--stop-token-ids", multiple=True, metavar="INT",
              help="Token id that ends a completion (repeatable).")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past the end-of-text token.")
@click.option("--seed", type=str, metavar="INT", default=None, help="Makes sampling reproducible.")
@click.option("--logprobs", type=str, metavar="INT", default=None,
              help="Top-k alternatives per token.")
@click.option("--device", default=None, help="torch device, e.g. cpu or cuda (default: the "
              "backend's: auto for local, cpu for hf).")
@click.option("--dtype", default=None, help="float32, float16 or bfloat16 (default: the "
              "checkpoint's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--stream", is_flag=True, help="Print the text as it is generated (one "
              "completion, not with --json).")
@constraint_flags
@_search_flags
@strategy_flags
@engine_flags
@remote_options
@click.pass_context
def generate(ctx: click.Context, args: tuple[str, ...], backend: str, device: str | None,
             dtype: str | None, as_json: bool, stream: bool, **flags: Any) -> None:
    """Generate completions of PROMPT with the model in folder MODEL, or with --base-url URL
    --model NAME (and no MODEL) on an OpenAI-compatible server."""
    remote = pop_remote(flags)
    model, prompt = _arguments(args, remote)
    search = {name: flags.pop(name) for name in _SEARCH_NAMES}
    engine = given(pop_engine_options(flags))
    strategy = pop_strategy(flags, bool(remote))
    params = sampling_params(flags)
    beam = _beam_params(search)
    if strategy is not None and (beam is not None or stream):
        raise InvalidParameterError("strategy", strategy.spec.name, "prints its choice at the "
                                    "end; drop --stream and --num-beams")
    if remote:
        backend = _check_remote(backend, beam, dict(device=device, dtype=dtype, **engine))
    elif backend == REMOTE_BACKEND:
        raise InvalidParameterError("backend", backend, "needs --base-url URL and --model NAME")
    elif engine:
        for name, value in engine.items():  # the engine runs them: auto must not fall back
            backend = engine_backend(backend, value, name)
        check_engine_options(dict(engine, device=device, dtype=dtype))  # before loading
    if stream:
        if beam is not None:
            raise InvalidParameterError("stream", True, "beam search returns its hypotheses "
                                        "at the end; drop --stream or --num-beams")
        _check_stream(backend, params, as_json)
    with contextlib.ExitStack() as stack:
        if remote:
            stack.enter_context(quiet_remote_logs())
            stack.enter_context(naming_url(remote["base_url"]))
            gen = stack.enter_context(contextlib.closing(open_remote(remote)))
        else:
            with _quiet_loading():
                backend, gen = load_generator(backend, model, device=device, dtype=dtype,
                                              **engine)
        report = {"engine": engine_report(gen.engine.config)} if engine else {}
        if strategy is not None:
            failed = run_strategy(strategy, gen, model, prompt, params, as_json,
                                  {"model": model, "backend": backend, "prompt": prompt,
                                   **report})
        else:
            failed = _run(gen, backend, model, prompt, params, beam, as_json, stream, remote,
                          report)
    if failed:
        ctx.exit(1)


def _arguments(args: tuple[str, ...], remote: dict[str, Any]) -> tuple[str, str]:
    """``(model, prompt)`` of the positional arguments: ``MODEL PROMPT`` for a model folder,
    ``PROMPT`` alone with ``--base-url`` (the model is ``--model``). Anything else is a usage
    error that says which form to use."""
    if remote:
        if len(args) != 1:
            raise click.UsageError(f"with --base-url give only PROMPT (the served model is "
                                   f"--model {remote['model']}); got {len(args)} arguments")
        return remote["model"], args[0]
    if len(args) != 2:
        raise click.UsageError(f"give MODEL PROMPT (a model folder and the prompt), or "
                               f"--base-url URL --model NAME PROMPT; got {len(args)} arguments")
    return args[0], args[1]


def _check_remote(backend: str, beam: Any, local_only: dict[str, Any]) -> str:
    """The backend of a ``--base-url`` run (``openai``), after refusing what a server cannot do:
    another ``--backend``, ``--num-beams`` (``CapabilityError``), and the local-only flags."""
    if backend not in ("auto", REMOTE_BACKEND):
        raise InvalidParameterError("backend", backend, "--base-url runs on the openai backend; "
                                    "drop --backend or --base-url")
    if beam is not None:
        raise CapabilityError(f"num_beams={beam.num_beams}: beam search needs the model's "
                              "logits, which an OpenAI-compatible server does not expose; use a "
                              "local model (MODEL) for --num-beams")
    refuse_local_only(local_only, "applies to a local model; a server chooses its own device, "
                      "dtype and engine options (quantization, KV cache, speculative decoding) "
                      "where it is launched")
    return REMOTE_BACKEND


def _run(gen: Any, backend: str, model: str, prompt: str, params: SamplingParams, beam: Any,
         as_json: bool, stream: bool, remote: dict[str, Any], report: dict[str, Any]) -> bool:
    """Generate and print (see the module docstring); whether a completion failed. ``report``:
    more keys of the ``--json`` object."""
    extra: dict[str, Any] = dict(report)
    if beam is not None:
        from metagen.generators.beam import BeamSearchGenerator

        gen = BeamSearchGenerator(gen, beam.num_beams, num_beam_groups=beam.num_beam_groups,
                                  diversity_penalty=beam.diversity_penalty,
                                  length_penalty=beam.length_penalty, stochastic=beam.stochastic)
        extra["beam"] = gen.beam_params(params).to_dict()
    if stream:
        _check_can_stream(backend, gen)
        return _stream(gen, prompt, params)
    errors: list[Exception | None] = []
    if remote:
        samples = gen.generate_samples([prompt], params)[0]
        raise_if_all_failed(samples)
        completions = [s.completion for s in samples]
        errors = [s.error for s in samples]
    else:
        completions = gen.generate([prompt], params)[0]
    if as_json:
        click.echo(json.dumps({
            "model": model, "backend": backend, "prompt": prompt,
            "params": params.to_dict(), **extra,
            "completions": [c.to_dict() for c in completions],
            "usage": json_usage(gen.usage),
        }, ensure_ascii=False))
    else:
        _print_text(prompt, completions)
    return _report_failures(completions, errors)


def json_usage(usage: Usage) -> dict[str, Any]:
    """``usage.to_dict()`` with unknown (NaN) FLOPs as None: strict JSON has no NaN."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in usage.to_dict().items()}
