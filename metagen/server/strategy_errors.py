"""A strategy request's refusals named by the request's own fields.

A strategy turns the request's fields into library arguments: the request's sampling fields
become each sample's parameters, with ``n`` set to the strategy's sample count (``metagen.n``;
``metagen.width x metagen.branching`` for a step search, whose first step samples that many from
the prompt). :func:`check_samples` builds those parameters before the strategy runs, so a
combination the library refuses (several samples at temperature 0) is a 400 before any model
call, streamed or not. :func:`request_error` turns an :class:`InvalidParameterError` the strategy
raises all the same into a 400 naming the request's field -- ``metagen.<name>`` for the
strategy's own parameters and its sample count, the body's name for a sampling field and for
the prompt, ``metagen`` for anything else -- never a field the client did not send, and never
an unhandled exception (a traceback in the server's log).
"""

from __future__ import annotations

from metagen.errors import InvalidParameterError
from metagen.server.errors import ApiError, bad_request
from metagen.server.requests import CHAT_FIELDS, COMPLETION_FIELDS, GenerationRequest
from metagen.server.strategy_params import STRATEGY_FIELDS, StrategyRequest

_SEARCH = "step_beam_search"


def samples_per_call(sreq: StrategyRequest) -> int:
    """The most samples one generate call of ``sreq`` asks for."""
    if sreq.strategy == _SEARCH:
        return int(sreq.options["width"]) * int(sreq.options["branching"])
    return sreq.n


def check_samples(sreq: StrategyRequest, req: GenerationRequest) -> None:
    """Raise the 400 of :func:`request_error` when the library refuses the samples' parameters
    (the request's, with ``n`` = :func:`samples_per_call`)."""
    try:
        req.params.with_(n=samples_per_call(sreq))
    except InvalidParameterError as exc:
        raise request_error(exc, sreq, req) from None


def request_error(exc: InvalidParameterError, sreq: StrategyRequest, req: GenerationRequest
                  ) -> ApiError:
    """The 400 of ``exc``, raised by the library while running ``sreq`` for ``req``, naming
    the request's field (see the module docstring)."""
    field = _field(exc.param, sreq, req)
    if exc.param == "n":
        counted = "metagen.width x metagen.branching" if sreq.strategy == _SEARCH else "metagen.n"
        return bad_request(field, f"{counted} asks for {exc.value!r} samples in one call: "
                           f"{exc.reason}")
    message = str(exc)
    if field != exc.param:
        message = message.replace(f"invalid {exc.param}=", f"invalid {field}=", 1)
    return bad_request(field, message)


def _field(param: str, sreq: StrategyRequest, req: GenerationRequest) -> str:
    if param == "n":
        return "metagen.width" if sreq.strategy == _SEARCH else "metagen.n"
    if param in STRATEGY_FIELDS[sreq.strategy]:
        return f"metagen.{param}"
    if param in ("prompt", "prompts"):  # a scorer refusing the prompt it was given
        return "messages" if req.chat else "prompt"
    name = (req.wire_names or {}).get(param, param)
    return name if name in (CHAT_FIELDS if req.chat else COMPLETION_FIELDS) else "metagen"
