"""Scorer specs: the one grammar every surface (``metagen eval --reward/--prm``, ``metagen demo
--reward/--prm``, ``metagen serve --orm/--prm NAME=SPEC``) reads, parsed by a pure function.

A spec is one string:

- ``FOLDER`` -- a local Hugging Face folder; its head says what it is
  (:func:`metagen.scorers.resolve.resolve_scorer`): a classification head or a value-head
  checkpoint is a reward model, any other causal LM a generative verifier scored by its
  confidence; for a PRM the head-readable layouts of :func:`~metagen.scorers.load_prm`.
- ``PRESET+FOLDER`` -- PRMs only: a causal LM (or token classifier) read in a declared layout,
  ``PRESET`` one of :data:`~metagen.scorers.PRM_PRESETS` (``math-shepherd+/models/ms``).
- ``likelihood`` / ``likelihood+FOLDER`` -- a causal LM's own confidence in the completion (its
  weakest token) and, as a PRM, in each step so far
  (:class:`~metagen.scorers.LikelihoodVerifier`); bare ``likelihood`` is the surface's default
  verifier (``metagen eval``: the policy's folder; ``metagen demo``: the testbed ORM).
- ``likelihood+URL?model=NAME[&aggregation=min|mean|window&window=K&timeout=S&num_params=P]``
  -- rewards only: the same confidence from a causal LM *served* at the OpenAI-compatible root
  ``URL`` (``http://HOST:PORT/v1``: vLLM, ``metagen serve``), read from echoed prompt
  log-probs (:class:`~metagen.scorers.remote_likelihood.RemoteLikelihoodVerifier`).
- ``judge+FOLDER`` -- rewards only: an LM judge's P("Yes") (:class:`~metagen.scorers.LMJudge`)
  over the folder's model.
- ``API+URL[?KEY=VALUE&...]`` -- a remote reward model (:class:`~metagen.scorers.RemoteRewardModel`;
  for a PRM :class:`~metagen.scorers.RemoteProcessRewardModel`) at the server root ``URL``
  (``http://`` or ``https://``; the api's path is appended), ``API`` one of ``pooling`` (vLLM
  ``POST /pooling``), ``classify`` (vLLM ``POST /classify``; not for PRMs), ``json``
  (metagen's ``POST /score``). Query keys are the constructor keywords: ``model`` (required: the
  served model's name), ``positive_label`` (an index or a label name), ``labels``
  (comma-separated names in index order), ``tokenizer`` (a local folder: send token ids laid out
  as the local scorer reads them), ``batch_size``, ``timeout`` (seconds), ``num_params``; for
  PRMs also ``format`` (a preset name) and ``aggregation`` (last, min, prod, mean). Example:
  ``pooling+http://127.0.0.1:8001?model=orm&positive_label=1``.
- ``unit-tests`` -- rewards only: the code task's hidden tests in the sandbox (an oracle).

:func:`parse_scorer_spec` never touches the filesystem or the network; an unknown form, an
unknown query key or a bad value raises ``InvalidParameterError`` naming the flag (``reward``,
``prm``, ``orm``) and, for a query, the key. :func:`canonical_spec` is the spec as a run key
holds it (folders made absolute, query keys sorted); :func:`spec_folder` the local folder whose
content a run key fingerprints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from metagen.errors import InvalidParameterError
from metagen.scorers.prm_format import PRM_PRESETS
from metagen.scorers.remote_wire import APIS, Api

Role = Literal["reward", "prm"]
Kind = Literal["folder", "likelihood", "judge", "remote", "unit-tests"]
Option = str | int | float | tuple[str, ...]

UNIT_TESTS = "unit-tests"
LIKELIHOOD = "likelihood"
JUDGE = "judge"
AGGREGATIONS = ("last", "min", "prod", "mean")
_COMMON_KEYS = ("model", "positive_label", "labels", "tokenizer", "batch_size", "timeout",
                "num_params")
LIKELIHOOD_KEYS = ("model", "aggregation", "window", "timeout", "num_params")
CONFIDENCES = ("min", "mean", "window")
REMOTE_KEYS: dict[Role, tuple[str, ...]] = {
    "reward": _COMMON_KEYS, "prm": (*_COMMON_KEYS, "format", "aggregation")}


@dataclass(frozen=True, slots=True)
class ScorerSpec:
    """A parsed spec. ``kind``: ``folder`` (``target`` the folder, ``format`` a PRM preset or
    None), ``likelihood`` (``target`` the folder, None for the surface's default, or a server's
    root URL with ``options``: :attr:`remote_likelihood`), ``judge``
    (``target`` the folder), ``remote`` (``target`` the server root, ``api``, ``options`` the
    typed query keys in the order given), ``unit-tests``."""

    kind: Kind
    target: str | None = None
    api: Api | None = None
    options: tuple[tuple[str, Option], ...] = ()
    format: str | None = None

    @property
    def remote_likelihood(self) -> bool:
        """A likelihood verifier served by an OpenAI-compatible server."""
        return self.kind == "likelihood" and self.target is not None and "://" in self.target

    @property
    def kwargs(self) -> dict[str, Option]:
        """The remote scorer's constructor keywords (``labels`` as a list is the caller's)."""
        return dict(self.options)


def accepted_forms(role: Role) -> str:
    """The spec forms ``role`` accepts, for error messages and help texts."""
    forms = ["FOLDER", "likelihood", "likelihood+FOLDER"]
    if role == "reward":
        forms += ["likelihood+URL?model=NAME", "judge+FOLDER", "pooling+URL?model=NAME[&...]", "classify+URL?model=NAME[&...]",
                  "json+URL?model=NAME", UNIT_TESTS]
    else:
        forms += ["PRESET+FOLDER (" + ", ".join(sorted(PRM_PRESETS)) + ")",
                  "pooling+URL?model=NAME&tokenizer=FOLDER[&...]", "json+URL?model=NAME"]
    return ", ".join(forms)


def parse_scorer_spec(spec: str, role: Role, flag: str) -> ScorerSpec:
    """``spec`` -> :class:`ScorerSpec` for ``role`` (see the module docstring); errors name
    ``flag``. Pure: no filesystem or network access."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidParameterError(flag, spec, f"must be one of: {accepted_forms(role)}")
    if spec == UNIT_TESTS:
        if role != "reward":
            raise InvalidParameterError(flag, spec, "unit-tests is an outcome reward only")
        return ScorerSpec("unit-tests")
    if spec == LIKELIHOOD:
        return ScorerSpec("likelihood")
    head, plus, rest = spec.partition("+")
    if plus and head in APIS:
        return _remote(spec, head, rest, role, flag)  # type: ignore[arg-type]
    if plus and head == LIKELIHOOD and "://" in rest:
        if role != "reward":
            raise InvalidParameterError(flag, spec, "likelihood+URL is an outcome reward only "
                                        "(a PRM's step scores need its tokenizer: give "
                                        "likelihood+FOLDER)")
        root, options = _query(spec, rest, LIKELIHOOD_KEYS, flag, "likelihood")
        return ScorerSpec("likelihood", root, options=options)
    if plus and head in (LIKELIHOOD, JUDGE):
        if not rest or "://" in rest:
            raise InvalidParameterError(flag, spec, f"{head}+ takes a local model folder")
        if head == JUDGE and role != "reward":
            raise InvalidParameterError(flag, spec, "judge+FOLDER is an outcome reward only")
        return ScorerSpec("likelihood" if head == LIKELIHOOD else "judge", rest)
    if plus and head in PRM_PRESETS:
        if role != "prm" or not rest or "://" in rest:
            raise InvalidParameterError(flag, spec, f"{head}+FOLDER (a PRM layout) is for "
                                        "--prm, over a local folder")
        return ScorerSpec("folder", rest, format=head)
    if "://" in spec:
        raise InvalidParameterError(flag, spec, "a server needs its api in front, e.g. "
                                    f"pooling+{spec}?model=NAME; accepted forms: "
                                    f"{accepted_forms(role)}")
    return ScorerSpec("folder", spec)


def _remote(spec: str, api: Api, url: str, role: Role, flag: str) -> ScorerSpec:
    if role == "prm" and api == "classify":
        raise InvalidParameterError(flag, spec, "classify gives one value per sequence, a PRM "
                                    "needs one per step: use pooling+ or json+")
    root, options = _query(spec, url, REMOTE_KEYS[role], flag, api)
    return ScorerSpec("remote", root, api=api, options=options)


def _query(spec: str, url: str, keys: tuple[str, ...], flag: str, head: str
           ) -> tuple[str, tuple[tuple[str, Option], ...]]:
    """(the server root, the typed query options) of ``url``; ``model`` is required."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise InvalidParameterError(flag, spec, f"{head}+ takes a server root http(s)://HOST"
                                    "[:PORT][/PATH] with options as ?KEY=VALUE&...")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidParameterError(flag, spec, f"malformed query: {exc}") from None
    options: list[tuple[str, Option]] = []
    seen: set[str] = set()
    for key, value in pairs:
        if key not in keys:
            raise InvalidParameterError(flag, spec, f"unknown key {key!r}; accepted keys: "
                                        f"{', '.join(keys)}")
        if key in seen:
            raise InvalidParameterError(flag, spec, f"key {key!r} is given twice")
        seen.add(key)
        options.append((key, _option(spec, key, value, flag, head)))
    if "model" not in seen:
        raise InvalidParameterError(flag, spec, "key 'model' is required: the served model's "
                                    "name, e.g. ?model=orm")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), tuple(options)


def _option(spec: str, key: str, value: str, flag: str, head: str = "") -> Option:
    """One query value, typed; ``InvalidParameterError`` naming ``flag`` and ``key``."""
    def bad(why: str) -> InvalidParameterError:
        return InvalidParameterError(flag, spec, f"key {key!r}={value!r}: {why}")

    if key in ("model", "tokenizer"):
        if not value:
            raise bad("must not be empty")
        return value
    if key == "positive_label":
        if not value:
            raise bad("must be a label index or name")
        return int(value) if value.isdigit() else value
    if key == "labels":
        names = tuple(value.split(","))
        if not value or any(not n for n in names) or len(set(names)) != len(names):
            raise bad("must be distinct comma-separated label names in index order")
        return names
    if key in ("batch_size", "num_params", "window"):
        if not value.isdigit() or int(value) < 1:
            raise bad("must be a positive integer")
        return int(value)
    if key == "timeout":
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise bad("must be a positive number of seconds")
        return seconds
    if key == "format":
        if value not in PRM_PRESETS:
            raise bad(f"must be one of {', '.join(sorted(PRM_PRESETS))}")
        return value
    if key == "aggregation":
        allowed = CONFIDENCES if head == LIKELIHOOD else AGGREGATIONS
        if value not in allowed:
            raise bad(f"must be one of {', '.join(allowed)}")
        return value
    raise bad("unknown key")  # pragma: no cover - REMOTE_KEYS lists exactly the keys above


def canonical_spec(spec: ScorerSpec, default: str | Path | None = None) -> str:
    """The spec as a run key holds it: folders (and a remote ``tokenizer`` folder) absolute,
    a bare ``likelihood`` as ``likelihood+`` the absolute ``default`` folder when one is given,
    query keys sorted. ``parse_scorer_spec`` of it gives the same scorer."""
    if spec.kind == "unit-tests":
        return UNIT_TESTS
    if spec.kind == "remote" or spec.remote_likelihood:
        head = spec.api if spec.kind == "remote" else LIKELIHOOD
        options = sorted((k, _absolute(str(v)) if k == "tokenizer" else
                          ",".join(v) if isinstance(v, tuple) else str(v))
                         for k, v in spec.options)
        return f"{head}+{spec.target}?{urlencode(options, safe=',/:')}"
    folder = spec.target if spec.target is not None else default
    if folder is None:
        return LIKELIHOOD
    prefix = {"likelihood": "likelihood+", "judge": "judge+"}.get(spec.kind, "")
    if spec.format is not None:
        prefix = spec.format + "+"
    return prefix + _absolute(str(folder))


def spec_folder(spec: ScorerSpec, default: str | Path | None = None) -> str | None:
    """The local model folder the scorer loads (None for a remote scorer or the unit tests)."""
    if spec.kind in ("remote", "unit-tests") or spec.remote_likelihood:
        return None
    folder = spec.target if spec.target is not None else default
    return None if folder is None else str(folder)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())
