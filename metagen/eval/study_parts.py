"""The entries of a study file, each read and checked on its own (:mod:`metagen.eval.study`
crosses them): a task (``tasks[i]``), a model (``models[i]``), a strategy set (``runs[i]``) and a
scorer spec (``reward`` / ``prm``). Paths in the file are relative to the file's folder. Every
refusal is an ``InvalidParameterError`` naming the dotted key (:mod:`metagen.eval.study_keys`).
Nothing here loads a model; a task's items are read (its data file checked) and a code task's
``preflight`` run."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.study_keys import at, integer, items, join, known_keys, mapping, number, text

TASK_KEYS = ("name", "data", "limit", "label")
MODEL_KEYS = ("path", "backend", "quantization", "deterministic", "base_url", "model",
              "timeout", "max_retries", "label")
LOCAL_ONLY = ("backend", "quantization", "deterministic")
REMOTE_ONLY = ("model", "timeout", "max_retries")
RUN_KEYS = ("strategies", "n", "reward", "prm", "label")
STRATEGY_KEYS = ("name", "args")
BACKENDS = ("auto", "local", "hf")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")


def folder_name(label: str, path: str) -> str:
    """``label`` as one folder name: each character outside letters, digits and ``._+=-``
    becomes ``_``; a name of dots only is refused naming ``path``."""
    name = _UNSAFE.sub("_", label)
    if not name.strip("."):
        raise InvalidParameterError(path, label, "is not usable as a folder name")
    return name


def resolve(base: Path, value: str) -> str:
    """``value`` (``~`` expanded) as an absolute path, relative ones from ``base``."""
    path = Path(value).expanduser()
    return str((path if path.is_absolute() else base / path).resolve())


@dataclass(frozen=True, slots=True)
class StudyTask:
    """``tasks[i]``: ``NAME`` or ``{name, data, limit, label}``."""

    key: str
    name: str
    folder: str
    data: str | None
    limit: int | None

    def argv(self) -> list[str]:
        """Its ``metagen eval`` arguments."""
        return [self.name, *(["--data", self.data] if self.data else []),
                *(["--limit", str(self.limit)] if self.limit is not None else [])]


def parse_task(value: Any, key: str, base: Path) -> StudyTask:
    """``tasks[i]`` (see :class:`StudyTask`); its items are read (the data checked)."""
    from metagen.eval.tasks import get_task

    entry = {"name": value} if isinstance(value, str) else mapping(value, key)
    name_key = key if isinstance(value, str) else join(key, "name")
    known_keys(entry, key, TASK_KEYS, ("name",))
    name = text(entry["name"], name_key)
    with at(name_key, {"task": name_key}):
        spec = get_task(name)
    data = resolve(base, text(entry["data"], join(key, "data"))) if "data" in entry else None
    limit = integer(entry["limit"], join(key, "limit"), 1) if "limit" in entry else None
    with at(key):
        spec.items(data, limit)
        spec.preflight()
    label = text(entry.get("label", name), join(key, "label"))
    return StudyTask(key, name, folder_name(label, join(key, "label")), data, limit)


@dataclass(frozen=True, slots=True)
class StudyModel:
    """``models[i]``: a local folder, ``PATH`` or ``{path, backend, quantization,
    deterministic, label}``, or a server, ``{base_url, model, timeout, max_retries, label}``
    (its key from ``OPENAI_API_KEY``, never from the file)."""

    key: str
    folder: str
    path: str | None = None
    backend: str = "auto"
    quantization: str | None = None
    deterministic: bool = False
    base_url: str | None = None
    served: str | None = None
    timeout: float | None = None
    max_retries: int | None = None

    def config_model(self) -> dict[str, Any]:
        """The ``model`` of its runs' :class:`~metagen.eval.config.EvalConfig` (as ``metagen
        eval`` makes it)."""
        if self.path is None:
            return {"base_url": self.base_url, "model": self.served, "revision": None}
        from metagen.generators.loading import engine_backend

        backend = engine_backend(self.backend, self.quantization)
        if self.deterministic:
            backend = engine_backend(backend, True, "deterministic")
        return {"path": self.path, "backend": backend,
                **({"quantization": self.quantization} if self.quantization else {}),
                **({"deterministic": True} if self.deterministic else {})}

    def argv(self) -> list[str]:
        """Its ``metagen eval`` arguments."""
        if self.path is None:
            return ["--base-url", str(self.base_url), "--model", str(self.served),
                    *(["--timeout", str(self.timeout)] if self.timeout is not None else []),
                    *(["--max-retries", str(self.max_retries)]
                      if self.max_retries is not None else [])]
        return ["--model", self.path, "--backend", self.backend,
                *(["--quantization", self.quantization] if self.quantization else []),
                *(["--deterministic"] if self.deterministic else [])]


def parse_model(value: Any, key: str, base: Path) -> StudyModel:
    """``models[i]`` (see :class:`StudyModel`); a local folder must exist, nothing is loaded."""
    from metagen.engine.config import QUANTIZATIONS

    entry = {"path": value} if isinstance(value, str) else mapping(value, key)
    known_keys(entry, key, MODEL_KEYS)
    if ("path" in entry) == ("base_url" in entry):
        raise InvalidParameterError(key, value, "give path (a model folder) or base_url and "
                                    "model (a server), one of them")
    if "path" in entry:
        for name in REMOTE_ONLY:
            if name in entry:
                raise InvalidParameterError(join(key, name), entry[name], "applies to a "
                                            "server (base_url) only")
        path_key = key if isinstance(value, str) else join(key, "path")
        path = resolve(base, text(entry["path"], path_key))
        if not Path(path).is_dir():
            raise InvalidParameterError(path_key, entry["path"], f"is not a folder ({path})")
        backend = text(entry.get("backend", "auto"), join(key, "backend"))
        if backend not in BACKENDS:
            raise InvalidParameterError(join(key, "backend"), backend,
                                        f"must be one of {', '.join(BACKENDS)}")
        quantization = entry.get("quantization")
        if quantization is not None and quantization not in QUANTIZATIONS:
            raise InvalidParameterError(join(key, "quantization"), quantization,
                                        f"must be one of {', '.join(QUANTIZATIONS)}")
        deterministic = entry.get("deterministic", False)
        if not isinstance(deterministic, bool):
            raise InvalidParameterError(join(key, "deterministic"), deterministic,
                                        "must be true or false")
        model = StudyModel(key, "", path=path, backend=backend, quantization=quantization,
                           deterministic=deterministic)
        with at(key):
            model.config_model()  # hf refuses quantization / deterministic, naming it
        label = entry.get("label", Path(path).name)
    else:
        for name in LOCAL_ONLY:
            if name in entry:
                raise InvalidParameterError(join(key, name), entry[name], "applies to a local "
                                            "model (path) only; a server chooses its own")
        known_keys(entry, key, MODEL_KEYS, ("model",))
        url = text(entry["base_url"], join(key, "base_url"))
        if "," in url:
            raise InvalidParameterError(join(key, "base_url"), url, "one server per model "
                                        "entry (a study runs without --ray)")
        served = text(entry["model"], join(key, "model"))
        timeout = number(entry["timeout"], join(key, "timeout")) if "timeout" in entry else None
        if timeout is not None and timeout <= 0:
            raise InvalidParameterError(join(key, "timeout"), timeout, "must be positive")
        retries = (integer(entry["max_retries"], join(key, "max_retries"))
                   if "max_retries" in entry else None)
        model = StudyModel(key, "", base_url=url, served=served, timeout=timeout,
                           max_retries=retries)
        label = entry.get("label", served)
    label = text(label, join(key, "label"))
    return dataclasses.replace(model, folder=folder_name(label, join(key, "label")))


@dataclass(frozen=True, slots=True)
class StudyStrategies:
    """``runs[i]``: ``{strategies, n, reward, prm, label}``, one run folder per task, model
    and seed. ``strategies``: names or ``{name, args}``; ``args`` checked by the strategy's
    typed config, merged into the run's one ``strategy_args`` (a key goes to every strategy
    of the run that takes it, so two strategies taking a key must give it the same value).
    ``n``/``reward``/``prm`` None (or null in the file): the study's."""

    key: str
    folder: str
    names: tuple[str, ...]
    args: dict[str, Any]
    n: tuple[int, ...] | None
    reward: str | None
    prm: str | None

    def argv(self) -> list[str]:
        """Its ``--strategy`` and ``--strategy-arg`` arguments (each value as JSON, which
        ``--strategy-arg`` reads back to the same value)."""
        out = ["--strategy", ",".join(self.names)]
        for name, value in self.args.items():
            out += ["--strategy-arg", f"{name}={json.dumps(value)}"]
        return out


def parse_strategies(value: Any, key: str) -> StudyStrategies:
    """``runs[i]`` (see :class:`StudyStrategies`)."""
    from metagen.eval.catalog import GREEDY, spec_of, strategy_names

    entry = mapping(value, key)
    known_keys(entry, key, RUN_KEYS, ("strategies",))
    names: list[str] = []
    given: list[dict[str, Any]] = []
    for j, item in enumerate(items(entry["strategies"], join(key, "strategies"))):
        at_j = join(join(key, "strategies"), j)
        spec = {"name": item} if isinstance(item, str) else mapping(item, at_j)
        known_keys(spec, at_j, STRATEGY_KEYS, ("name",))
        name_key = at_j if isinstance(item, str) else join(at_j, "name")
        name = text(spec["name"], name_key)
        if name not in strategy_names():
            raise InvalidParameterError(name_key, name, f"must be one of "
                                        f"{', '.join(strategy_names())}")
        if name in names:
            raise InvalidParameterError(name_key, name, "is already in this run")
        args = dict(mapping(spec.get("args", {}), join(at_j, "args")))
        if name == GREEDY and args:
            raise InvalidParameterError(join(at_j, "args"), args, "greedy takes no args")
        if args:
            with at(join(at_j, "args")):
                spec_of(name).options(args)
        names.append(name)
        given.append(args)
    merged = _merge_args(names, given, join(key, "strategies"))
    ns: tuple[int, ...] | None = None
    if "n" in entry:
        ns = tuple(integer(x, join(join(key, "n"), k), 1)
                   for k, x in enumerate(items(entry["n"], join(key, "n"))))
    label = text(entry.get("label", "+".join(names)), join(key, "label"))
    reward, prm = (text(entry[s], join(key, s)) if entry.get(s) is not None else None
                   for s in ("reward", "prm"))
    return StudyStrategies(key, folder_name(label, join(key, "label")), tuple(names), merged,
                           ns, reward, prm)


def _merge_args(names: list[str], given: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run's one ``strategy_args``; refuses an arg another strategy of the run takes
    without giving it the same value (it would reach that strategy too)."""
    from metagen.eval.catalog import GREEDY, spec_of

    takes: list[set[str]] = [set() if n == GREEDY else {p.name for p in spec_of(n).params()}
                             for n in names]
    merged: dict[str, Any] = {}
    for j, args in enumerate(given):
        for arg, v in args.items():
            for other, (name, theirs) in enumerate(zip(names, given)):
                if other != j and arg in takes[other] and (arg not in theirs
                                                           or theirs[arg] != v):
                    raise InvalidParameterError(
                        join(join(join(key, j), "args"), arg), v,
                        f"{name} ({join(key, other)}) takes {arg} too, and a run's value of a "
                        f"key goes to each strategy of it that takes it: give {name} the "
                        "same value, or put the two in separate runs entries")
            merged[arg] = v
    return merged


def scorer_spec(spec: str, role: str, key: str, base: Path, model: StudyModel) -> str:
    """A ``reward`` / ``prm`` spec (:mod:`metagen.scorers.scorer_spec`) for the runs on
    ``model``, canonical (folders absolute, relative ones from ``base``); a bare ``likelihood``
    on a server model is refused (it is a local model's confidence)."""
    from metagen.scorers.scorer_spec import canonical_spec, parse_scorer_spec

    with at(key, {role: key}):
        parsed = parse_scorer_spec(spec, "prm" if role == "prm" else "reward", role)
    if parsed.kind == "likelihood" and parsed.target is None and model.path is None:
        raise InvalidParameterError(key, spec, f"bare likelihood is a local model's confidence; "
                                    f"{model.key} is a server: give likelihood+FOLDER")
    if parsed.kind in ("folder", "likelihood", "judge") and parsed.target is not None:
        parsed = dataclasses.replace(parsed, target=resolve(base, parsed.target))
    if parsed.kind == "remote":
        parsed = dataclasses.replace(parsed, options=tuple(
            (k, resolve(base, str(v)) if k == "tokenizer" else v) for k, v in parsed.options))
    return canonical_spec(parsed, model.path)
