"""A strategy request's refusals named by the request's own fields.

The request's sampling fields become each sample's parameters, with ``n`` set by the strategy
to the samples of each generate call (``metagen.n``, or the knobs the spec derives from it:
``width x branching`` for a beam search). The runner runs the strategy up to its first generate
call before answering (:func:`metagen.server.strategy_calls.first_call`), so a combination the
library refuses there (several samples at temperature 0) or a call over the server's bound
(:mod:`metagen.server.strategy_policy`) is a 400 before any model call, streamed or not.
:func:`request_error` turns an :class:`InvalidParameterError` the strategy raises, then or
later, into a 400 naming the request's field -- for a count of samples in one call, the largest
integer option the request set (``metagen.width``), else ``metagen.n``; ``metagen.<name>`` for
the strategy's own parameters, ``metagen.n`` for a knob derived from it, ``metagen.reward`` /
``metagen.prm`` for a scorer, the body's name for a sampling field and for the prompt,
``metagen`` for anything else -- never a field the client did not send, and never an unhandled
exception (a traceback in the server's log). An option that needs an optional package the
server lacks is a 400 naming ``metagen`` (:func:`missing_package`).
"""

from __future__ import annotations

from metagen.errors import InvalidParameterError
from metagen.server.errors import ApiError, bad_request
from metagen.server.requests import CHAT_FIELDS, COMPLETION_FIELDS, GenerationRequest
from metagen.server.strategy_params import StrategyRequest, config_fields
from metagen.server.strategy_policy import TooManySamples


def count_field(sreq: StrategyRequest) -> tuple[str, str]:
    """The request's field that sets how many samples a call asks for, and the knobs as the
    request set them: the largest integer option it set (the first of equals), else
    ``metagen.n``."""
    ints = {k: v for k, v in sreq.options.items()
            if isinstance(v, int) and not isinstance(v, bool)}
    if not ints:
        return "metagen.n", f"metagen.n: {sreq.n}"
    largest = max(ints, key=lambda k: ints[k])
    return f"metagen.{largest}", ", ".join(f"metagen.{k}: {v}" for k, v in ints.items())


def request_error(exc: InvalidParameterError, sreq: StrategyRequest, req: GenerationRequest
                  ) -> ApiError:
    """The 400 of ``exc``, raised by the library while running ``sreq`` for ``req``, naming
    the request's field (see the module docstring)."""
    if exc.param == "n":
        field, knobs = count_field(sreq)
        if isinstance(exc, TooManySamples):
            return bad_request(field, f"{sreq.strategy} would sample {exc.samples} completions "
                               f"in one generate call ({knobs}): {exc.reason}")
        return bad_request(field, f"{sreq.strategy} asks for {exc.value!r} samples in one "
                           f"call ({knobs}): {exc.reason}")
    field = _field(exc.param, sreq, req)
    message = str(exc)
    if field != exc.param:
        message = message.replace(f"invalid {exc.param}=", f"invalid {field}=", 1)
    return bad_request(field, message)


def missing_package(exc: ImportError, sreq: StrategyRequest) -> ApiError:
    """The 400 of a strategy whose options need an optional package this server lacks (mbr's
    ``utility: "embedding"`` without its embedding model's package), naming ``metagen``."""
    return bad_request("metagen", f"{sreq.strategy} with these options needs what this server "
                       f"lacks: {exc}")


def _field(param: str, sreq: StrategyRequest, req: GenerationRequest) -> str:
    spec = sreq.spec
    if param in config_fields(spec):
        return f"metagen.{param}"
    if param in spec.scale(sreq.n):
        return "metagen.n"
    needs = [need for need, arg in spec.scorer_args.items() if param in (need, arg)]
    if needs:
        return f"metagen.{needs[0]}"
    if param in ("prompt", "prompts"):  # a scorer refusing the prompt it was given
        return "messages" if req.chat else "prompt"
    name = (req.wire_names or {}).get(param, param)
    return name if name in (CHAT_FIELDS if req.chat else COMPLETION_FIELDS) else "metagen"
