"""The engine core is handed its drivers (metagen.engine.engine_parts): without them it samples
and refuses what needs one; build_engine / from_pretrained hand it the standard ones."""

from __future__ import annotations

import pytest

from metagen.beam_params import BeamSearchParams
from metagen.engine.build import build_engine, standard_drivers
from metagen.engine.config import EngineConfig
from metagen.engine.engine_parts import EngineDrivers
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models import load_model
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams


@pytest.fixture(scope="module")
def llama(random_model_dir):
    return load_model(random_model_dir("llama"))


def test_a_bare_engine_samples_and_refuses_beam_search_and_scoring(llama):
    bare = LLMEngine(llama, None, EngineConfig(device="cpu", block_size=8))
    assert bare.speculator is None
    got = bare.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_tokens=4,
                                                    ignore_eos=True))
    assert len(got[0].outputs[0].token_ids) == 4
    with pytest.raises(InvalidParameterError, match="beam"):
        bare.add_request([1, 2, 3], BeamSearchParams(num_beams=2, max_tokens=3))
    with pytest.raises(InvalidParameterError, match="scor"):
        bare.score([[1, 2]], [[[3]]])
    assert not bare.requests  # nothing was queued


def test_build_engine_hands_the_standard_drivers(llama):
    cfg = EngineConfig(device="cpu", block_size=8, prompt_lookup=2)
    engine = build_engine(llama, None, cfg)
    assert engine.speculator is not None and engine.drivers.beam is not None
    assert engine.score([[1, 2]], [[[3]]])[0][0] <= 0.0
    plain = standard_drivers(llama, EngineConfig(device="cpu"))
    assert isinstance(plain, EngineDrivers) and plain.speculator is None
    assert plain.scorer is not None
