"""The options that put a command on an OpenAI-compatible server instead of a model folder.

``--base-url URL`` switches the policy model to :class:`~metagen.generators.openai.OpenAIGenerator`
(backend ``openai``) and ``--model NAME`` names the model that server serves; ``--api-key``
(or ``OPENAI_API_KEY``) is sent as a bearer header and never printed. ``--timeout`` bounds a whole
call (retries included) and ``--max-retries`` the retries of a transient failure. The two options
come together or not at all: ``--model`` without ``--base-url`` (or the reverse) is an
``InvalidParameterError`` naming the missing one, before anything is sent.

A command that runs on a server refuses, naming the flag, what only a local model can do:
``--device`` / ``--dtype`` (the server chose them), ``--speculative-model`` (a draft runs inside
the built-in engine; a server does its own speculation, configured where it is launched).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import click

from metagen.cli.flags import float_flag, int_flag, option_group
from metagen.errors import BackendError, InvalidParameterError

ENV_API_KEY = "OPENAI_API_KEY"

REMOTE_OPTIONS = [
    click.option("--base-url", default=None, metavar="URL",
                 help="Run the policy model on an OpenAI-compatible server at URL (e.g. "
                 "http://127.0.0.1:8000/v1) instead of loading it locally; needs --model."),
    click.option("--model", "served_model", default=None, metavar="NAME",
                 help="The model the --base-url server serves (its /v1/models id)."),
    click.option("--api-key", default=None, envvar=ENV_API_KEY, show_envvar=True,
                 metavar="KEY", help="Bearer key for --base-url (never printed)."),
    click.option("--timeout", "remote_timeout", type=str, metavar="SECONDS", default=None,
                 help="With --base-url: deadline of one call, retries included (default 60)."),
    click.option("--max-retries", type=str, metavar="INT", default=None,
                 help="With --base-url: retries of a transient failure (default 3)."),
]
REMOTE_NAMES = ("base_url", "served_model", "api_key", "remote_timeout", "max_retries")


# Decorates a click command with REMOTE_OPTIONS (its kwargs: REMOTE_NAMES).
remote_options = option_group(REMOTE_OPTIONS)


def pop_remote(flags: dict[str, Any]) -> dict[str, Any]:
    """Take the remote options out of a command's ``**flags`` and check they come together:
    ``{}`` without ``--base-url``, else the OpenAIGenerator arguments. Raises
    ``InvalidParameterError`` naming ``model`` / ``base_url`` / a remote-only flag given alone."""
    values = {name: flags.pop(name) for name in REMOTE_NAMES}
    if values["base_url"] is None:
        if values["served_model"] is not None:
            raise InvalidParameterError("model", values["served_model"], "names a model served "
                                        "at --base-url URL; give --base-url too (a model folder "
                                        "is the MODEL argument)")
        for flag, name in (("timeout", "remote_timeout"), ("max_retries", "max_retries")):
            if values[name] is not None:
                raise InvalidParameterError(flag, values[name], "applies to --base-url only")
        return {}
    if not values["served_model"]:
        raise InvalidParameterError("base_url", values["base_url"], "needs --model NAME: the "
                                    "model the server serves")
    options: dict[str, Any] = {"base_url": values["base_url"], "model": values["served_model"],
                               "api_key": values["api_key"] or None}
    timeout = float_flag("timeout", values["remote_timeout"])
    retries = int_flag("max_retries", values["max_retries"])
    if timeout is not None:
        options["timeout"] = timeout
    if retries is not None:
        options["max_retries"] = retries
    return options


def refuse_local_only(given: dict[str, Any], why: str) -> None:
    """Raise ``InvalidParameterError`` naming the first flag of ``given`` (name -> value, None
    meaning not given) that was given: it cannot apply to a model on a server (``why``)."""
    for name, value in given.items():
        if value is not None:
            raise InvalidParameterError(name, value, why)


def open_remote(options: dict[str, Any]) -> Any:
    """The :class:`OpenAIGenerator` of :func:`pop_remote`'s options (nothing is sent yet)."""
    from metagen.generators.openai import OpenAIGenerator

    return OpenAIGenerator(**options)


@contextlib.contextmanager
def quiet_remote_logs() -> Iterator[None]:
    """No retry / probe log lines on the terminal while a command runs on a server: the command
    prints its own one-line error when a call fails."""
    logger = logging.getLogger("metagen.openai")
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def raise_if_all_failed(samples: Sequence[Any]) -> None:
    """When every sample of a call failed (the server could not be reached, or answered every
    request with an error), raise the first one's typed error: an infrastructure failure (exit
    status 2), not a completion that failed.
    ``samples``: :class:`~metagen.generators.openai.SampleResult` s."""
    errors = [s.error for s in samples]
    if errors and all(e is not None for e in errors):
        raise errors[0]


def at_url(error: BackendError, base_url: str) -> BackendError:
    """A copy of ``error`` (same type, status, param and cause) whose message starts with the
    server's URL, so a one-line report says which server failed."""
    return type(error)(f"{base_url}: {error.message}", status=error.status, param=error.param,
                       cause=error.cause)


@contextlib.contextmanager
def naming_url(base_url: str) -> Iterator[None]:
    """Re-raise a :class:`BackendError` of the block through :func:`at_url` (once: an error
    that already names the URL passes unchanged)."""
    try:
        yield
    except BackendError as exc:
        if exc.message.startswith(base_url):
            raise
        raise at_url(exc, base_url) from exc
