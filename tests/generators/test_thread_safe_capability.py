"""Each backend declares whether it may be called from several threads at once
(``Capabilities.thread_safe``, which the eval runner reads to do items in threads): the engine
(one loop thread owns it) and a server's client do; the transformers backend (one model, one
sampler state, an unlocked usage total), the mock and a capability set that does not say do
not."""

from __future__ import annotations

from metagen.generators.base import Capabilities
from metagen.generators.mock import MockGenerator
from metagen.generators.openai import OpenAIGenerator


def test_the_default_is_not_thread_safe():
    assert Capabilities().thread_safe is False
    assert MockGenerator(["a"]).capabilities.thread_safe is False


def test_a_server_client_is_thread_safe():
    gen = OpenAIGenerator("http://127.0.0.1:9/v1", "m", dialect="vllm")  # no request is made
    try:
        assert gen.capabilities.thread_safe is True
    finally:
        gen.close()


def test_the_engine_is_and_transformers_is_not(stories_path):
    from metagen.generators.hf import HFGenerator
    from metagen.generators.local import LocalGenerator

    with LocalGenerator.from_pretrained(stories_path) as local:
        assert local.capabilities.thread_safe is True
    assert HFGenerator.from_pretrained(stories_path).capabilities.thread_safe is False
