"""Token healing with beam search (plain, diverse, stochastic) on stories260K: the search runs on
the prompt without its healed tokens, every hypothesis re-produces the removed text first (its
text starts where the prompt ended), and every score is the transformers log-probability of the
hypothesis's tokens after the kept prompt (the healed tokens' the model's own, not renormalized).
One beam is the sampling path's greedy healed completion, score = its summed logprobs."""

from __future__ import annotations

import pytest
import torch

from metagen.beam_params import BeamSearchParams
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

# (prompt, k): mid-word with k 1 and 2, a trailing space, a one-letter word start
CASES = [("Once upon a ti", 1), ("Once upon a ti", 2), ("Once upon a ", 1), ("Lily saw a b", 1)]


@pytest.fixture(scope="module")
def stories(stories_engine_factory):
    return stories_engine_factory(num_blocks=256, block_size=16)


@pytest.fixture(scope="module")
def hf(stories_path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()


def run(engine, prompt: str, params: BeamSearchParams):
    ids = engine.tokenizer(prompt)["input_ids"]
    return ids, engine.run_until_done([engine.add_request(ids, params)])[0]


def hf_logprob(hf, kept: list[int], tokens: tuple[int, ...]) -> float:
    """Summed log p(tokens | kept) under a transformers forward of the whole sequence."""
    with torch.no_grad():
        logits = hf(torch.tensor([kept + list(tokens)])).logits[0].double()
    lp = torch.log_softmax(logits[len(kept) - 1:-1], -1)
    return float(lp.gather(1, torch.tensor(tokens)[:, None]).sum())


def check_healed(engine, prompt: str, ids: list[int], out, k: int) -> None:
    """The request ran on ``ids`` without 1..k healed tokens, and each hypothesis reads as the
    prompt continued: its kept prompt + tokens decode to ``prompt + text``."""
    tok = engine.tokenizer
    kept = list(out.prompt_ids)
    assert 1 <= len(ids) - len(kept) <= k and ids[:len(kept)] == kept
    for c in out.outputs:
        whole = tok.decode(kept + list(c.token_ids), skip_special_tokens=True)
        assert whole.startswith(prompt) and whole == prompt + c.text, (whole, c.text)


@pytest.mark.parametrize("prompt,k", CASES)
def test_every_beam_heals_and_scores_are_the_models_logprobs(stories, hf, prompt, k):
    params = BeamSearchParams(num_beams=4, num_return_sequences=4, max_tokens=8,
                              length_penalty=0.0, token_healing=k)
    ids, out = run(stories, prompt, params)
    check_healed(stories, prompt, ids, out, k)
    assert len({c.token_ids for c in out.outputs}) == 4
    scores = [c.cumulative_logprob for c in out.outputs]
    assert scores == sorted(scores, reverse=True)
    for c in out.outputs:
        want = hf_logprob(hf, list(out.prompt_ids), c.token_ids)
        assert c.cumulative_logprob == pytest.approx(want, abs=FLOAT_LOGPROB_TOL)


def test_first_tokens_differ_where_several_extend_the_removed_text(stories):
    """``Lily saw a b``: the beams start with different tokens that extend ``▁b``."""
    ids, out = run(stories, "Lily saw a b", BeamSearchParams(
        num_beams=8, num_return_sequences=8, max_tokens=3, token_healing=True))
    firsts = set(stories.tokenizer.convert_ids_to_tokens([c.token_ids[0] for c in out.outputs]))
    assert len(firsts) > 1 and all(f.startswith("▁b") for f in firsts), firsts


@pytest.mark.parametrize("prompt,k", CASES)
def test_one_beam_is_the_sampling_paths_greedy_healed_completion(stories, prompt, k):
    _, beam = run(stories, prompt, BeamSearchParams(num_beams=1, max_tokens=10,
                                                    length_penalty=0.0, token_healing=k))
    ids = stories.tokenizer(prompt)["input_ids"]
    [greedy] = stories.generate([ids], SamplingParams(
        temperature=0.0, max_tokens=10, ignore_eos=True, logprobs=0, token_healing=k))
    [b], [g] = beam.outputs, greedy.outputs
    assert beam.prompt_ids == greedy.prompt_ids
    assert b.token_ids == g.token_ids and b.text == g.text
    assert b.cumulative_logprob == pytest.approx(sum(g.logprobs), abs=FLOAT_LOGPROB_TOL)


def test_diverse_and_stochastic_beams_heal(stories, hf):
    for params in (BeamSearchParams(num_beams=4, num_return_sequences=4, num_beam_groups=2,
                                    diversity_penalty=1.0, max_tokens=6, token_healing=2),
                   BeamSearchParams(num_beams=4, max_tokens=6, stochastic=True, seed=3,
                                    token_healing=2)):
        ids, out = run(stories, "Once upon a ti", params)
        check_healed(stories, "Once upon a ti", ids, out, 2)
    for c in out.outputs:  # stochastic: the sequence's summed log-probability
        assert c.cumulative_logprob == pytest.approx(
            hf_logprob(hf, list(out.prompt_ids), c.token_ids), abs=FLOAT_LOGPROB_TOL)


def test_healing_changes_nothing_after_a_whole_word(stories):
    _, healed = run(stories, "Once upon a time", BeamSearchParams(
        num_beams=3, num_return_sequences=3, max_tokens=7, token_healing=True))
    _, plain = run(stories, "Once upon a time", BeamSearchParams(
        num_beams=3, num_return_sequences=3, max_tokens=6))
    assert [c.token_ids[1:] for c in healed.outputs] == [c.token_ids for c in plain.outputs]
    assert [c.text for c in healed.outputs] == [c.text for c in plain.outputs]


def test_bad_token_healing_is_refused_naming_it(stories_path):
    from metagen.engine.llm_engine import LLMEngine
    for bad in (-1, 9, 1.5, "1"):
        with pytest.raises(InvalidParameterError) as err:
            BeamSearchParams(num_beams=2, token_healing=bad)
        assert err.value.param == "token_healing"
    with pytest.raises(InvalidParameterError) as err:
        BeamSearchParams(num_beams=2, token_healing=True, choice=["a", "b"])
    assert err.value.param == "token_healing"
    bare = LLMEngine.from_pretrained(stories_path, tokenizer=False)
    with pytest.raises(InvalidParameterError) as err:
        bare.add_request([1, 403, 407], BeamSearchParams(num_beams=2, token_healing=True))
    assert err.value.param == "token_healing" and not bare.has_unfinished()
