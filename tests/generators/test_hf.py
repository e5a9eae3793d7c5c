"""HFGenerator on real models: stories260K and a random-weight Llama built in the test."""

from __future__ import annotations

import pytest
import torch

from metagen.errors import InvalidParameterError, InvalidPromptError, ModelLoadError
from metagen.generators.base import Generator, ScoringGenerator
from metagen.generators.hf import HFGenerator
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

LILY = ", there was a little girl named Lily."
OTHERS = ["The cat", "One day, a boy", "Tom and Sue", "The sun was", "Lily had a",
          "There was a dog", "Mom said", "The big tree", "A bird", "Sam wanted to",
          "Once", "The little car", "In the park", "Ben and his mom", "The fish", "It was a"]


def test_stories_greedy_lily(stories_gen) -> None:
    assert isinstance(stories_gen, Generator) and isinstance(stories_gen, ScoringGenerator)
    comp = stories_gen.generate(["Once upon a time"], SamplingParams(temperature=0,
                                                                      max_tokens=30))[0][0]
    assert comp.text.startswith(LILY)
    assert comp.finish_reason == "length" and len(comp.token_ids) == 30
    assert len(comp.logprobs) == 30 and all(lp <= 0 for lp in comp.logprobs)
    assert comp.cumulative_logprob == pytest.approx(sum(comp.logprobs))


def test_greedy_equals_plain_transformers_generate(random_llama_path) -> None:
    """Our processor + argmax == transformers' own greedy, batched with left padding."""
    gen = HFGenerator.from_pretrained(random_llama_path)
    prompts = ["Once upon a time", "The", "Tom and Sue went to the park to play"]
    ours = gen.generate(prompts, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    for prompt, (comp,) in zip(prompts, ours):
        enc = gen.tokenizer(prompt, return_tensors="pt")
        ref = gen.model.generate(**enc, do_sample=False, max_new_tokens=24, min_new_tokens=24,
                                 pad_token_id=0, return_dict_in_generate=True,
                                 output_logits=True)
        assert list(comp.token_ids) == ref.sequences[0, enc["input_ids"].shape[1]:].tolist()
        raw = torch.log_softmax(torch.stack(ref.logits)[:, 0].float(), dim=-1)  # (T, V)
        expected = raw.gather(1, torch.tensor(comp.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(comp.logprobs), expected, atol=FLOAT_LOGPROB_TOL)


def test_gpt2_greedy_and_context(random_gpt2_path) -> None:
    """Another architecture (learned positions, 128-token context) through the same path."""
    gen = HFGenerator.from_pretrained(random_gpt2_path)
    assert gen.context_length == 128
    prompts = ["Once upon a time", "The cat sat"]
    ours = gen.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    for prompt, (comp,) in zip(prompts, ours):
        enc = gen.tokenizer(prompt, return_tensors="pt")
        ref = gen.model.generate(**enc, do_sample=False, max_new_tokens=16, min_new_tokens=16,
                                 pad_token_id=0)
        assert list(comp.token_ids) == ref[0, enc["input_ids"].shape[1]:].tolist()
    with pytest.raises(InvalidPromptError, match="128"):
        gen.generate(prompts, SamplingParams(max_tokens=125))


def test_seeded_samples_do_not_depend_on_the_batch(stories_gen) -> None:
    params = SamplingParams(n=2, temperature=1.0, seed=1234, max_tokens=16)
    target = "Once upon a time"
    alone = stories_gen.generate([target], params)[0]
    with4 = stories_gen.generate(OTHERS[:2] + [target] + OTHERS[2:4], params)[2]
    with16 = stories_gen.generate(OTHERS[:9] + [target] + OTHERS[9:], params)[9]
    split = HFGenerator(stories_gen.model, stories_gen.tokenizer, max_batch_rows=3)
    chunked = split.generate(OTHERS[:4] + [target], params)[4]
    for other in (with4, with16, chunked):
        assert [c.token_ids for c in other] == [c.token_ids for c in alone]
    assert alone[0].token_ids != alone[1].token_ids


def test_n_samples_are_distinct_at_temperature_one(stories_gen) -> None:
    row = stories_gen.generate(["The cat"], SamplingParams(n=4, temperature=1.0, seed=5,
                                                          max_tokens=20))[0]
    assert len(row) == 4
    assert len({c.token_ids for c in row}) == 4  # P(any two equal) is negligible at 20 tokens


def test_stop_string_spanning_tokens_is_cut(stories_gen) -> None:
    # greedy tokens: ... "▁little" "▁g" "ir" "l" "▁named" ...: the stop spans three tokens
    comp = stories_gen.generate(["Once upon a time"], SamplingParams(
        temperature=0, max_tokens=30, stop=("irl named",)))[0][0]
    assert comp.text == ", there was a little g"
    assert (comp.finish_reason, comp.stop_reason) == ("stop", "irl named")
    assert "irl named" in stories_gen.tokenizer.decode(list(comp.token_ids))


def test_stop_token_id_and_earliest_stop_string(stories_gen) -> None:
    params = SamplingParams(temperature=0, max_tokens=30, stop_token_ids=(426,))  # "."
    comp = stories_gen.generate(["Once upon a time"], params)[0][0]
    assert comp.text == ", there was a little girl named Lily"
    assert (comp.finish_reason, comp.stop_reason, comp.token_ids[-1]) == ("stop", 426, 426)
    comp = stories_gen.generate(["Once upon a time"], SamplingParams(
        temperature=0, max_tokens=30, stop=("park", "Lily", "there")))[0][0]
    assert (comp.text, comp.stop_reason) == (", ", "there")


def test_min_tokens_delays_stops(stories_gen) -> None:
    base = SamplingParams(temperature=0, max_tokens=40)
    comp = stories_gen.generate(["Once upon a time"], base.with_(stop=(".",), min_tokens=12)
                                )[0][0]
    assert comp.text == LILY + " She loved to play outside in the park"
    comp = stories_gen.generate(["Once upon a time"], base.with_(stop_token_ids=(426,),
                                                                min_tokens=12))[0][0]
    assert comp.finish_reason == "stop" and len(comp.token_ids) >= 12
    assert 426 not in comp.token_ids[:-1]


def test_top_logprobs_and_usage(stories_gen) -> None:
    before = stories_gen.usage
    params = SamplingParams(n=3, temperature=0.8, seed=2, max_tokens=8, logprobs=3)
    rows = stories_gen.generate(["Once upon a time", "The cat"], params)
    used = stories_gen.usage - before
    for row in rows:
        for comp in row:
            assert len(comp.top_logprobs) == len(comp.token_ids)
            for tok, lp, top in zip(comp.token_ids, comp.logprobs, comp.top_logprobs):
                assert len(top) == 3 and max(top.values()) <= 0
                if tok in top:
                    assert top[tok] == pytest.approx(lp, abs=1e-5)
    assert used.calls == 1
    lens = [len(stories_gen.tokenizer(p)["input_ids"]) for p in ("Once upon a time", "The cat")]
    assert used.prompt_tokens == 3 * sum(lens)  # n x prompt: no prefix cache
    assert used.generated_tokens == sum(len(c.token_ids) for r in rows for c in r)
    fm = stories_gen.flop_model
    assert used.generator_flops == pytest.approx(sum(
        fm.sequence(p, len(c.token_ids)) for p, r in zip(lens, rows) for c in r))
    assert used.wall_time > 0


def test_score_matches_generation_logprobs(stories_gen) -> None:
    comp = stories_gen.generate(["Once upon a time"], SamplingParams(temperature=0,
                                                                      max_tokens=12))[0][0]
    before = stories_gen.usage
    (good, other, empty), = stories_gen.score(["Once upon a time"],
                                              [[comp.text, ", there was a purple cow", ""]])
    assert good == pytest.approx(comp.cumulative_logprob, abs=FLOAT_LOGPROB_TOL)
    assert other < good and empty == 0.0
    used = stories_gen.usage - before
    assert used.scorer_calls == 1 and used.calls == 0 and used.scorer_tokens > 0


def test_numerical_error_fails_only_its_row(stories_path) -> None:
    """Scripted fault (a logits hook that writes NaN into one prompt's rows), V22."""
    plain = HFGenerator.from_pretrained(stories_path)
    bad_prompt = plain.tokenizer("The cat")["input_ids"]

    def poison(logits, seqs):
        out = logits.clone()
        for k, seq in enumerate(seqs):
            if seq.prompt_ids == bad_prompt and seq.step == 3:
                out[k, 7] = float("nan")
        return out

    hooked = HFGenerator(plain.model, plain.tokenizer, logits_hook=poison)
    params = SamplingParams(temperature=0, max_tokens=10)
    got = hooked.generate(["Once upon a time", "The cat", "Tom"], params)
    ref = plain.generate(["Once upon a time", "The cat", "Tom"], params)
    assert got[1][0].finish_reason == "error" and got[1][0].stop_reason == "numerical_error"
    assert len(got[1][0].token_ids) == 3
    assert got[0][0] == ref[0][0] and got[2][0] == ref[2][0]


@pytest.mark.parametrize("changes, param", [
    ({"logit_bias": {512: 1.0}}, "logit_bias"),
    ({"allowed_token_ids": (5, 600)}, "allowed_token_ids"),
    ({"stop_token_ids": (512,)}, "stop_token_ids"),
])
def test_token_ids_out_of_vocab_are_rejected(stories_gen, changes, param) -> None:
    with pytest.raises(InvalidParameterError) as info:
        stories_gen.generate(["Hi"], SamplingParams(**changes))
    assert info.value.param == param


def test_context_overflow_names_both_numbers(stories_gen) -> None:
    with pytest.raises(InvalidPromptError) as info:
        stories_gen.generate(["Once upon a time"], SamplingParams(max_tokens=510))
    assert "5 tokens" in str(info.value) and "max_tokens=510" in str(info.value)
    assert "512" in str(info.value)


def test_bad_prompts_are_rejected(stories_gen) -> None:
    for prompts in ([""], [], "Once", ["<s>"], [[{"role": "user", "content": "hi"}]]):
        with pytest.raises(InvalidPromptError):
            stories_gen.generate(prompts, SamplingParams(max_tokens=4))
    with pytest.raises(InvalidParameterError, match="params"):
        stories_gen.generate(["Hi"], {"temperature": 0})


def test_chat_prompt_uses_the_template(stories_path) -> None:
    gen = HFGenerator.from_pretrained(stories_path)
    gen.tokenizer.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    msgs = [{"role": "user", "content": "Once upon a time"}]
    chat = gen.generate([msgs], SamplingParams(temperature=0, max_tokens=8))[0][0]
    text = gen.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=8))[0][0]
    assert chat.token_ids == text.token_ids  # the template's BOS is not doubled


def test_model_load_errors(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="config.json"):
        HFGenerator.from_pretrained(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError):
        HFGenerator.from_pretrained(tmp_path)
    with pytest.raises(InvalidParameterError, match="dtype"):
        HFGenerator.from_pretrained(tmp_path, dtype="float8")


def test_quantization_is_a_typed_error_naming_it(stories_path) -> None:
    """The hf backend has no quantized weights: asking is an InvalidParameterError naming
    ``quantization`` (was a bare TypeError from the constructor), before any load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    for q in ("int8", "w8a8", "int4", "int4-all"):
        with pytest.raises(InvalidParameterError, match="quantization") as caught:
            HFGenerator.from_pretrained(stories_path, quantization=q)
        assert caught.value.param == "quantization" and "LocalGenerator" in str(caught.value)
    model = AutoModelForCausalLM.from_pretrained(stories_path)
    with pytest.raises(InvalidParameterError, match="quantization"):
        HFGenerator(model, AutoTokenizer.from_pretrained(stories_path), quantization="int8")


def test_generator_does_not_inherit_model_generation_defaults(stories_path) -> None:
    """A checkpoint's generation_config (here a repetition penalty) must not leak in."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(stories_path)
    model.generation_config.repetition_penalty = 5.0
    gen = HFGenerator(model, AutoTokenizer.from_pretrained(stories_path))
    comp = gen.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=12))[0][0]
    assert comp.text.startswith(LILY)
    assert torch.is_grad_enabled()


def test_sampling_params_reach_the_decoder(stories_gen) -> None:
    """Plumbing: every kind of processor named in SamplingParams changes the HF output."""
    greedy = SamplingParams(temperature=0, max_tokens=30)
    prompt = ["Once upon a time"]
    comp = stories_gen.generate(prompt, greedy.with_(bad_words=("Lily",)))[0][0]
    assert "Lily" not in comp.text and comp.text.startswith(", there was a little girl named")
    comp = stories_gen.generate(prompt, greedy.with_(logit_bias={432: -100.0}))[0][0]
    assert comp.token_ids[0] != 432
    allowed = (261, 298, 315, 383, 426)
    comp = stories_gen.generate(prompt, greedy.with_(allowed_token_ids=allowed))[0][0]
    assert set(comp.token_ids) <= set(allowed)
    comp = stories_gen.generate(prompt, greedy.with_(no_repeat_ngram_size=2, max_tokens=60))[0][0]
    ids = list(stories_gen.tokenizer("Once upon a time")["input_ids"]) + list(comp.token_ids)
    bigrams = list(zip(ids, ids[1:]))
    assert len(bigrams) == len(set(bigrams))


def test_tiny_temperatures_never_give_garbage(stories_gen) -> None:
    """V3: 1e-8 is greedy; 1e-4 and 0.009 sample from a near-one-hot distribution."""
    greedy = stories_gen.generate(["Once upon a time"], SamplingParams(temperature=0,
                                                                       max_tokens=16))[0][0]
    for t in (1e-8, 1e-4, 0.009):
        comp = stories_gen.generate(["Once upon a time"], SamplingParams(
            temperature=t, seed=3, max_tokens=16))[0][0]
        assert comp.token_ids == greedy.token_ids
        assert all(lp == lp and lp <= 0 for lp in comp.logprobs)  # no NaN


def test_huge_top_k_is_clamped_and_a_bad_request_leaves_it_working(stories_gen) -> None:
    """V5 (top_k 10**9 == disabled) and S11-style survival after a rejection."""
    base = SamplingParams(temperature=1.0, seed=11, max_tokens=12)
    off = stories_gen.generate(["The cat"], base)[0][0]
    with pytest.raises(InvalidParameterError):
        stories_gen.generate(["The cat"], base.with_(stop_token_ids=(10**6,)))
    huge = stories_gen.generate(["The cat"], base.with_(top_k=10**9))[0][0]
    assert huge.token_ids == off.token_ids


def test_score_across_a_token_merge(stories_gen) -> None:
    """Prompt "Once upon a ti" + "me": "time" is one token, so it is scored as a whole,
    conditioned on the prompt tokens before it (the rule shared with LocalGenerator.score)."""
    from metagen.generators.hf_score import scored_sequence
    tok = stories_gen.tokenizer
    p_ids = tok("Once upon a ti")["input_ids"]
    ids, k = scored_sequence(tok, "Once upon a ti", p_ids, "Once upon a ti", "me")
    assert ids == tok("Once upon a time")["input_ids"] and ids[:k] == p_ids[:k] and k < len(p_ids)
    a_ids = tok("Once upon a")["input_ids"]
    assert scored_sequence(tok, "Once upon a", a_ids, "Once upon a", " time") == \
        (a_ids + [378], len(a_ids))
    (merged,), = stories_gen.score(["Once upon a ti"], [["me"]])
    with torch.no_grad():
        logp = torch.log_softmax(stories_gen.model(torch.tensor([ids])).logits[0].float(), -1)
    expected = sum(float(logp[t - 1, ids[t]]) for t in range(k, len(ids)))
    assert merged == pytest.approx(expected, abs=FLOAT_LOGPROB_TOL)


def test_same_accounting_and_scores_as_the_engine(stories_gen, stories_path) -> None:
    """HF and the built-in engine report the same work the same way (no prefix cache hit here)."""
    local_mod = pytest.importorskip("metagen.generators.local")
    local = local_mod.LocalGenerator.from_pretrained(stories_path)
    params = SamplingParams(temperature=0, max_tokens=20)
    hf_before = stories_gen.usage
    ours = stories_gen.generate(["Once upon a time"], params)[0][0]
    theirs = local.generate(["Once upon a time"], params)[0][0]
    hf_used = stories_gen.usage - hf_before
    assert ours.token_ids == theirs.token_ids and ours.text == theirs.text
    for field in ("prompt_tokens", "generated_tokens", "calls"):
        assert getattr(hf_used, field) == getattr(local.usage, field)
    assert hf_used.generator_flops == pytest.approx(local.usage.generator_flops, rel=1e-9)
    conts = [[", there was a dog", "me", ""]]
    for prompt in ("Once upon a time", "Once upon a ti"):
        assert stories_gen.score([prompt], conts)[0] == pytest.approx(
            local.score([prompt], conts)[0], abs=FLOAT_LOGPROB_TOL)


def test_missing_weights_are_an_error_not_random_values(tmp_path, stories_path) -> None:
    """transformers fills weights missing from the checkpoint with random values; the backend
    refuses such a checkpoint (the engine's check: the config's layers against the weights')."""
    from tests.broken_checkpoints import copy_checkpoint, edit_config

    folder = copy_checkpoint(stories_path, tmp_path / "layers50")
    edit_config(num_hidden_layers=50)(folder)
    with pytest.raises(ModelLoadError, match=r"num_hidden_layers=50 but the checkpoint holds "
                       r"weights for 5 layers") as info:
        HFGenerator.from_pretrained(folder)
    assert len(str(info.value).splitlines()) == 1


def test_weights_cast_to_int8_are_refused_with_the_engines_error(tmp_path,
                                                                  stories_path) -> None:
    """transformers casts int8-stored weights back to float and runs them ("time time time");
    the backend applies the engine's weight checks and raises the engine's error."""
    from metagen.engine.models import load_model
    from tests.broken_checkpoints import cast_to_int8, copy_checkpoint

    folder = copy_checkpoint(stories_path, tmp_path / "int8")
    cast_to_int8(folder)
    with pytest.raises(ModelLoadError) as engine:
        load_model(folder)
    with pytest.raises(ModelLoadError, match="non-float dtype torch.int8") as hf:
        HFGenerator.from_pretrained(folder)
    assert str(hf.value) == str(engine.value)


def test_untied_head_missing_is_named_and_tied_head_is_not_missing(tmp_path, stories_path,
                                                                   random_llama_path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "no_head"
    shutil.copytree(random_llama_path, folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="1 weights .* missing .*'lm_head.weight'"):
        HFGenerator.from_pretrained(folder)
    # stories260K ties its head to the embedding and stores no lm_head.weight: not missing
    gen = HFGenerator.from_pretrained(stories_path)
    assert gen.model.get_output_embeddings().weight is gen.model.get_input_embeddings().weight


@pytest.mark.parametrize("case", ["hidden_size_not_the_weights", "config_is_a_list",
                                  "truncated_data", "header_length_past_end"])
def test_broken_checkpoints_are_one_line_load_errors(tmp_path, stories_path, case) -> None:
    from tests.broken_checkpoints import BROKEN, copy_checkpoint

    folder = copy_checkpoint(stories_path, tmp_path / case)
    BROKEN[case][0](folder)
    with pytest.raises(ModelLoadError) as info:
        HFGenerator.from_pretrained(folder)
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("device", ["bogus", "cuda:99"])
def test_unavailable_device_fails_before_loading(tmp_path, device) -> None:
    from metagen.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match="device"):
        HFGenerator.from_pretrained(tmp_path / "never_read", device=device)
