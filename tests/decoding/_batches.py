"""Random mixed batches of SequenceStates for the decoding tests."""

from __future__ import annotations

import random

from metagen.decoding import SequenceState
from metagen.types import SamplingParams

V = 48


def random_params(rng: random.Random) -> SamplingParams:
    if rng.random() < 0.2:
        return SamplingParams(temperature=0.0, repetition_penalty=rng.choice([1.0, 1.3]))
    kw = dict(temperature=rng.choice([0.5, 1.0, 1.7]), seed=rng.randrange(100))
    if rng.random() < 0.2:
        kw["mirostat_tau"] = rng.choice([1.0, 3.0])
    for name, values in [("top_k", [0, 5, 20]), ("top_p", [1.0, 0.8, 0.95]),
                         ("min_p", [0.0, 0.05]), ("typical_p", [1.0, 0.9]),
                         ("epsilon_cutoff", [0.0, 0.01]), ("eta_cutoff", [0.0, 0.02]),
                         ("repetition_penalty", [1.0, 1.4]), ("presence_penalty", [0.0, 0.5]),
                         ("frequency_penalty", [0.0, -0.3]), ("no_repeat_ngram_size", [0, 3]),
                         ("min_tokens", [0, 4])]:
        kw[name] = rng.choice(values)
    if rng.random() < 0.3:
        kw["logit_bias"] = {rng.randrange(V): rng.uniform(-5, 5)}
    if rng.random() < 0.2:
        kw["allowed_token_ids"] = tuple(rng.sample(range(V), 10))
    kw["max_tokens"] = 16
    return SamplingParams(**kw)


def random_batch(seed: int, rows: int) -> list[SequenceState]:
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        prompt = [rng.randrange(V) for _ in range(rng.randrange(1, 8))]
        output = [rng.randrange(V) for _ in range(rng.randrange(0, 6))]
        out.append(SequenceState(random_params(rng), prompt, output, sample_index=i,
                                 eos_token_ids=(0,), bad_words_ids=((1, 2), (3,))))
    return out
