"""LogitArithmeticGenerator against a direct transformers computation of the combined logits:
greedy contrastive decoding, DExperts and proxy tuning token for token over 64 tokens, batched
rows equal to rows alone, and a vocabulary mismatch refused naming the model."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from metagen.decoding.logit_arithmetic import contrastive_scores
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.logit_arithmetic import LogitArithmeticGenerator
from metagen.generators.tokenize import encode_prompt
from metagen.types import SamplingParams

STEPS = 64
EOS = 2  # every model here ends with id 2; ignore_eos keeps it from being chosen
PROMPTS = ["Once upon a time", "The little dog ran to", "Lily and Tom"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True)
RefCombine = Callable[[list[torch.Tensor]], torch.Tensor]


def _with_tokenizer(model, folder: Path, stories: Path) -> Path:
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(stories / name, folder / name)
    return folder


def _random_llama(folder: Path, stories: Path, seed: int, layers: int, hidden: int,
                  vocab: int = 512) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper logits than the 0.02-std init: greedy is well separated
        model.lm_head.weight.mul_(20.0)
    return _with_tokenizer(model, folder, stories)


@pytest.fixture(scope="module")
def models(tmp_path_factory, stories_path) -> dict[str, Path]:
    """Models sharing the stories vocabulary: two random Llamas of different sizes, and a
    perturbed copy of stories260K (an amateur that mostly agrees with it)."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("lockstep_models")
    big = _random_llama(root / "big", stories_path, seed=1, layers=2, hidden=48)
    small = _random_llama(root / "small", stories_path, seed=2, layers=1, hidden=32)
    model = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    perturbed = _with_tokenizer(model, root / "perturbed", stories_path)
    return {"big": big, "small": small, "stories": stories_path, "perturbed": perturbed}


def hf_lockstep(folders: Sequence[Path], prompt: list[int], steps: int, combine: RefCombine
                ) -> list[int]:
    """Reference: each model's own transformers forward with its own KV cache, the combined
    scores computed from their last logits, the argmax (EOS excluded) fed to every model."""
    from transformers import AutoModelForCausalLM

    nets = [AutoModelForCausalLM.from_pretrained(f, dtype=torch.float32).eval() for f in folders]
    pasts: list = [None] * len(nets)
    ids = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(steps):
            last = []
            for j, net in enumerate(nets):
                res = net(ids, past_key_values=pasts[j], use_cache=True)
                pasts[j] = res.past_key_values
                last.append(res.logits[0, -1].float())
            scores = combine(last).clone()
            scores[EOS] = float("-inf")
            tok = int(scores.argmax())
            out.append(tok)
            ids = torch.tensor([[tok]])
    return out


def ref_contrastive(alpha: float, beta: float | None = None, tau: float = 1.0) -> RefCombine:
    """Li et al.: log p_e - log p_a where p_e >= alpha * max p_e, p_a = softmax(z_a / tau)
    (O'Brien & Lewis with beta)."""
    def combine(z: list[torch.Tensor]) -> torch.Tensor:
        pe = torch.softmax(z[0].double(), -1)
        za = z[1].double() / tau
        if beta is None:
            s = pe.log() - torch.softmax(za, -1).log()
        else:
            s = (1 + beta) * z[0].double() - beta * za
        return torch.where(pe >= alpha * pe.max(), s, torch.tensor(float("-inf"),
                                                                    dtype=torch.float64))
    return combine


def _check_equal(gen: LogitArithmeticGenerator, folders: Sequence[Path], combine: RefCombine,
                 prompts: Sequence[str] = PROMPTS) -> list[list[int]]:
    """The generator's greedy tokens for ``prompts`` in one batch equal the reference's."""
    got = [list(c[0].token_ids) for c in gen.generate(list(prompts), GREEDY)]
    for prompt, tokens in zip(prompts, got):
        want = hf_lockstep(folders, encode_prompt(gen.tokenizer, prompt), STEPS, combine)
        assert tokens == want, prompt
    return got


def test_contrastive_random_pair_equals_transformers_reference(models):
    with LogitArithmeticGenerator.contrastive(models["big"], models["small"], alpha=0.1) as g:
        _check_equal(g, [models["big"], models["small"]], ref_contrastive(0.1))


@pytest.mark.parametrize("beta", [None, 0.5])
def test_contrastive_stories_vs_perturbed_amateur_equals_reference(models, beta):
    with LogitArithmeticGenerator.contrastive(models["stories"], models["perturbed"],
                                              alpha=0.1, beta=beta) as g:
        got = _check_equal(g, [models["stories"], models["perturbed"]],
                           ref_contrastive(0.1, beta))
    # the amateur changes the choice: plain greedy on the expert picks other tokens somewhere
    plain = hf_lockstep([models["stories"]], encode_prompt(g.tokenizer, PROMPTS[0]), STEPS,
                        lambda z: z[0])
    assert plain != got[0]


def test_amateur_temperature_half_equals_reference_and_changes_the_choice(models):
    """Li et al.'s tau = 0.5 on the amateur, token for token against transformers; the
    sharpened amateur picks other tokens than tau = 1 somewhere."""
    folders = [models["stories"], models["perturbed"]]
    with LogitArithmeticGenerator.contrastive(*folders, alpha=0.1,
                                              amateur_temperature=0.5) as g:
        got = _check_equal(g, folders, ref_contrastive(0.1, tau=0.5))
    untempered = hf_lockstep(folders, encode_prompt(g.tokenizer, PROMPTS[0]), STEPS,
                             ref_contrastive(0.1))
    assert untempered != got[0]


def test_dexperts_equals_reference(models):
    folders = [models["big"], models["stories"], models["small"]]
    with LogitArithmeticGenerator.dexperts(*folders, alpha=0.5) as g:
        _check_equal(g, folders, lambda z: z[0] + 0.5 * (z[1] - z[2]))


def test_proxy_tuning_equals_reference(models):
    """The base (stories260K, 512 positions) is capped to what the small models hold (256)."""
    folders = [models["stories"], models["big"], models["small"]]
    with pytest.raises(InvalidParameterError) as err:
        LogitArithmeticGenerator.proxy_tuning(*folders)
    assert err.value.param == "tuned" and "256" in str(err.value)
    with LogitArithmeticGenerator.proxy_tuning(*folders, max_model_len=256) as g:
        _check_equal(g, folders, lambda z: z[0] + (z[1] - z[2]))


def test_batched_rows_equal_rows_alone_greedy_and_seeded(models):
    """Rows in one batch (and n > 1 samples, each with its own mirrors) get the tokens they
    get alone; usage counts the amateur's compute too."""
    sampled = SamplingParams(temperature=0.8, max_tokens=24, n=2, seed=7)
    with LogitArithmeticGenerator.contrastive(models["stories"], models["perturbed"],
                                              alpha=0.1) as g:
        for params in (GREEDY, sampled):
            together = g.generate(PROMPTS, params)
            alone = [g.generate([p], params)[0] for p in PROMPTS]
            assert [[c.token_ids for c in cs] for cs in together] == \
                [[c.token_ids for c in cs] for cs in alone]
        assert len({c.token_ids for c in g.generate(PROMPTS[:1], sampled)[0]}) == 2
        before = g.usage.generator_flops
        g.generate(PROMPTS[:1], GREEDY)
        spent = g.usage.generator_flops - before
    with LogitArithmeticGenerator.contrastive(models["stories"], models["small"], alpha=0.1,
                                              max_model_len=256) \
            as light:
        before = light.usage.generator_flops
        light.generate(PROMPTS[:1], GREEDY)
        light_spent = light.usage.generator_flops - before
    assert spent > light_spent  # the perturbed stories amateur costs more than the small one


def test_vocabulary_size_mismatch_names_the_model(models, tmp_path, stories_path):
    other = _random_llama(tmp_path / "wide", stories_path, seed=4, layers=1, hidden=32,
                          vocab=600)
    with pytest.raises(InvalidParameterError) as err:
        LogitArithmeticGenerator.contrastive(models["big"], other)
    assert err.value.param == "amateur" and str(other) in str(err.value)
    assert "600" in str(err.value) and "512" in str(err.value)


def test_token_strings_mismatch_names_the_model(models, tmp_path):
    swapped = tmp_path / "swapped"
    shutil.copytree(models["small"], swapped)
    tok = json.loads((swapped / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    vocab[by_id[300]], vocab[by_id[301]] = 301, 300
    (swapped / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(InvalidParameterError) as err:
        LogitArithmeticGenerator.dexperts(models["big"], models["stories"], swapped)
    assert err.value.param == "antiexpert" and str(swapped) in str(err.value)
    assert "id 300" in str(err.value)


def test_scoring_and_beams_are_refused_and_bad_alpha_named(models):
    with pytest.raises(InvalidParameterError) as err:
        LogitArithmeticGenerator.contrastive(models["big"], models["small"], alpha=2.0)
    assert err.value.param == "alpha"
    with pytest.raises(InvalidParameterError) as err:
        LogitArithmeticGenerator.contrastive(models["big"], models["small"],
                                             amateur_temperature=0.0)
    assert err.value.param == "amateur_temperature"
    with LogitArithmeticGenerator.contrastive(models["big"], models["small"]) as g:
        assert not g.capabilities.prompt_scoring
        with pytest.raises(CapabilityError):
            g.score(["a"], [["b"]])


def _engines(models, names, **aux_options):
    from metagen.engine.llm_engine import LLMEngine

    main = LLMEngine.from_pretrained(models[names[0]], max_model_len=128)
    return main, [LLMEngine.from_pretrained(models[n], **aux_options) for n in names[1:]]


def test_tight_auxiliary_cache_preempts_mirrors_and_stays_exact(models):
    """An amateur cache of 10 blocks cannot hold three ~70-token rows at once: its mirrors are
    preempted and recomputed, and the tokens are still the reference's."""
    main, [amateur] = _engines(models, ["big", "small"], num_blocks=10, block_size=16)
    with LogitArithmeticGenerator(main, [("amateur", amateur)], _contrast,
                                  main_role="expert") as g:
        _check_equal(g, [models["big"], models["small"]], ref_contrastive(0.1))
    assert amateur.scheduler.num_preemptions > 0
    amateur.check_integrity()


def _contrast(z: torch.Tensor, aux: Sequence[torch.Tensor]) -> torch.Tensor:
    return contrastive_scores(z, aux[0], 0.1)


def test_scripted_auxiliary_fault_is_retried_per_request_and_stays_exact(models):
    """A forward of the amateur raising once (scripted fault) fails the lockstep hook's call for
    the batch; the engine calls the hook again per request, the mirrors the failed step dropped
    are recreated, and that call's tokens are still the reference's, as are the next call's."""
    main, [amateur] = _engines(models, ["big", "small"])
    real = amateur.runner.extend
    calls = {"n": 0}

    def flaky(reqs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("scripted amateur fault")
        return real(reqs)

    amateur.runner.extend = flaky
    with LogitArithmeticGenerator(main, [("amateur", amateur)], _contrast,
                                  main_role="expert") as g:
        _check_equal(g, [models["big"], models["small"]], ref_contrastive(0.1))
        assert calls["n"] > 3  # the fault fired inside that call
        _check_equal(g, [models["big"], models["small"]], ref_contrastive(0.1))
        main.check_integrity()
    amateur.check_integrity()
