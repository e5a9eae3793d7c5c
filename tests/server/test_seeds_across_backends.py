"""The same seeded SamplingParams give the same samples through ``OpenAIGenerator`` against
``metagen serve`` as through ``LocalGenerator`` on the same model (token ids compared), although
``OpenAIGenerator`` sends one request per sample: each carries the seed and its
``sample_index``. Also: bad words reach metagen's server, and the server's ``sample_index``
field is checked."""

from __future__ import annotations

import httpx
import pytest

from metagen.generators.openai import OpenAIGenerator
from metagen.types import SamplingParams
from tests.server.conftest import MODEL, start_server, stop_server

PARAMS = SamplingParams(n=4, temperature=1.0, max_tokens=24, seed=11, logprobs=0)  # ids back


@pytest.fixture(scope="module")
def served(stories_path):
    from metagen.generators.local import LocalGenerator
    gen = LocalGenerator.from_pretrained(stories_path)
    running = start_server(gen)
    remote = OpenAIGenerator(running.base_url, MODEL, max_retries=0)
    try:
        yield gen, remote, running
    finally:
        remote.close()
        stop_server(running)
        gen.close()


def _ids(gen, params: SamplingParams) -> list[tuple[int, ...]]:
    [comps] = gen.generate(["Once upon a time"], params)
    return [c.token_ids for c in comps]


def test_openai_generator_on_metagen_gives_the_local_samples(served) -> None:
    local, remote, _ = served
    assert remote.dialect.name == "metagen"
    want = _ids(local, PARAMS)
    assert len(set(want)) == 4  # four different samples: an index mix-up would show
    assert _ids(remote, PARAMS) == want
    with_bad = PARAMS.with_(bad_words=("Lily",))
    assert _ids(remote, with_bad) == _ids(local, with_bad)


def test_sample_index_is_the_first_samples_index(served) -> None:
    """Sample j of a request with ``sample_index`` k is sample k + j of the seed."""
    local, _, running = served
    want = _ids(local, PARAMS)
    body = {"model": MODEL, "prompt": "Once upon a time", "n": 2, "temperature": 1.0,
            "max_tokens": 24, "seed": 11, "sample_index": 2, "return_tokens_as_token_ids": True,
            "logprobs": 0}
    answer = httpx.post(running.base_url + "/completions", json=body, timeout=60).json()
    got = [tuple(int(t.removeprefix("token_id:")) for t in c["logprobs"]["tokens"])
           for c in answer["choices"]]
    assert got == want[2:]
    for bad in (-1, 1.5, "2", True):
        reply = httpx.post(running.base_url + "/completions", timeout=60,
                           json={**body, "sample_index": bad})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "sample_index"


def test_wire_fields_per_dialect() -> None:
    """Bad words go to metagen's server only (vLLM's ``bad_words`` bans token sequences, not
    text: refused, never sent with other semantics); metagen's server gets the seed and the
    sample index, other servers ``seed + i``."""
    from metagen.errors import CapabilityError
    from metagen.generators.openai_wire import Dialect, build_request, check_supported
    params = SamplingParams(seed=5, bad_words=("Lily",))
    for name in ("openai", "vllm", "sglang", "llamacpp", "llamacpp-python"):
        with pytest.raises(CapabilityError, match="bad_words"):
            check_supported(params, Dialect(name))
    check_supported(params, Dialect("metagen"))
    _, body = build_request("m", "Once", params, 3, Dialect("metagen"))
    assert (body["seed"], body["sample_index"], body["bad_words"]) == (5, 3, ["Lily"])
    _, body = build_request("m", "Once", SamplingParams(seed=5), 3, Dialect("vllm"))
    assert body["seed"] == 8 and "sample_index" not in body
