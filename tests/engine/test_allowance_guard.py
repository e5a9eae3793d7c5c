"""The engine loop keeps a call's allowance (stories260K): the token pool holds with speculative
decoding too, and one caller's allowance never changes another caller's samples."""

from __future__ import annotations

import threading

import pytest

from metagen.allowance import Allowance
from metagen.generators.local import LocalGenerator

PROMPT = "Once upon a time"


@pytest.mark.parametrize("options", [{}, {"prompt_lookup": 2, "num_speculative_tokens": 4}])
def test_token_pool_is_never_exceeded(stories_engine_factory, options):
    from metagen.types import SamplingParams
    gen = LocalGenerator(stories_engine_factory(**options))
    try:
        params = SamplingParams(temperature=1.0, n=3, max_tokens=80, seed=4, ignore_eos=True)
        call = gen.generate_metered([PROMPT, "The cat"], params, Allowance(generated_tokens=37))
    finally:
        gen.close()
    comps = [c for row in call.completions for c in row]
    assert len(comps) == 6
    assert sum(c.num_tokens for c in comps) == call.total.generated_tokens <= 37
    assert all(c.stop_reason == "budget" for c in comps)


def test_one_callers_allowance_leaves_the_others_samples_alone(stories_engine_factory):
    from metagen.types import SamplingParams
    gen = LocalGenerator(stories_engine_factory())
    params = SamplingParams(temperature=1.0, n=2, max_tokens=60, seed=9, ignore_eos=True)
    try:
        alone = gen.generate(["The little bird"], params)
        got: dict[str, object] = {}

        def limited() -> None:
            got["limited"] = gen.generate_metered([PROMPT], params, Allowance(generated_tokens=5))

        thread = threading.Thread(target=limited)
        thread.start()
        together = gen.generate(["The little bird"], params)
        thread.join()
    finally:
        gen.close()
    assert [c.token_ids for c in together[0]] == [c.token_ids for c in alone[0]]
    assert got["limited"].total.generated_tokens <= 5  # type: ignore[attr-defined]
