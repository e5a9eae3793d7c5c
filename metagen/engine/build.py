"""Assemble an :class:`~metagen.engine.llm_engine.LLMEngine` with its drivers.

The engine core is handed its drivers (:class:`~metagen.engine.engine_parts.EngineDrivers`);
this module builds the standard ones from an :class:`~metagen.engine.config.EngineConfig`: beam
search (:func:`~metagen.engine.beam_search.make_beam_driver`), scoring
(:class:`~metagen.engine.engine_scoring.EngineScorer`) and the speculator the config describes
(prompt lookup or a draft model, :func:`~metagen.engine.speculative_decoding.build_speculator`)
unless one is given.

- :func:`build_engine` -- an engine over a loaded model;
- :func:`load_engine` -- the model (and tokenizer) of a Hugging Face folder, then
  :func:`build_engine` (what ``LLMEngine.from_pretrained`` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metagen.engine.beam_search import make_beam_driver
from metagen.engine.config import EngineConfig
from metagen.engine.engine_parts import EngineDrivers
from metagen.engine.engine_scoring import EngineScorer
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models import CausalLM, ModelConfig, load_model
from metagen.engine.speculative_decoding import Speculator, build_speculator
from metagen.errors import ModelLoadError


def standard_drivers(model: CausalLM, config: EngineConfig,
                     speculator: Speculator | None = None) -> EngineDrivers:
    """Beam search, scoring, and ``speculator`` -- else the one ``config`` describes (None when it
    describes none; a draft model is loaded here, and must share ``model``'s vocabulary)."""
    return EngineDrivers(
        speculator=speculator if speculator is not None else build_speculator(config, model),
        beam=make_beam_driver, scorer=EngineScorer)


def build_engine(model: CausalLM, tokenizer: Any = None, config: EngineConfig | None = None,
                 speculator: Speculator | None = None) -> LLMEngine:
    """An engine over ``model`` with the standard drivers (:func:`standard_drivers`).
    ``tokenizer`` (optional) enables text, stop strings and bad words; ``speculator`` overrides
    the one ``config`` describes. Raises what ``LLMEngine`` raises for a config that does not
    fit the model."""
    cfg = config or EngineConfig()
    return LLMEngine(model, tokenizer, cfg, standard_drivers(model, cfg, speculator))


def load_engine(path: str | Path, config: EngineConfig | None = None, tokenizer: Any = None,
                **options: Any) -> LLMEngine:
    """Load a Hugging Face folder; ``options`` are :class:`EngineConfig` fields. The RoPE tables
    cover only the positions this engine can run (:meth:`EngineConfig.max_positions`). The
    folder's tokenizer is loaded unless one is given (``tokenizer=False``: none)."""
    cfg = config or EngineConfig(**options)
    positions = cfg.max_positions(ModelConfig.from_folder(path))
    model = load_model(path, cfg.torch_dtype(), cfg.torch_device(), positions, cfg.quantization)
    if tokenizer is False:  # asked for none
        tokenizer = None
    elif tokenizer is None and any((Path(path) / f).exists()
                                   for f in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = load_tokenizer(Path(path))
    return build_engine(model, tokenizer, cfg)


def load_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer; a corrupt or unreadable one is a one-line ModelLoadError."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 -- tokenizers raise many types; all mean "unusable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"cannot load the tokenizer in {folder} (tokenizer.json / "
                             f"tokenizer_config.json): {first}") from exc
