"""A request longer than the KV cache holds is reported as the KV cache's capacity (tokens per
sequence, and the options that raise it), not as the model's context length; a request longer
than the model's context still names the model's context length."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.types import SamplingParams


def test_a_small_kv_cache_is_named_as_such(stories_path) -> None:
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(stories_path, num_blocks=8, block_size=16) as gen:
        assert gen.engine.max_model_len == 128  # 8 blocks of 16 tokens; the model has 512
        with pytest.raises(InvalidPromptError) as caught:
            gen.generate(["Once upon a time"], SamplingParams(max_tokens=200))
        with pytest.raises(InvalidParameterError) as direct:
            gen.engine.add_request([1, 403, 407], SamplingParams(max_tokens=200))
    for exc in (caught.value, direct.value):
        message = str(exc)
        assert "KV cache holds at most 128 tokens" in message and "512" in message, message
        assert "num_blocks" in message and "maximum context length" not in message


def test_the_models_context_is_named_when_it_is_the_limit(stories_path) -> None:
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(stories_path) as gen:
        with pytest.raises(InvalidPromptError) as caught:
            gen.generate(["Once upon a time"], SamplingParams(max_tokens=600))
    assert "maximum context length is 512 tokens" in str(caught.value)
    assert "KV cache" not in str(caught.value)
