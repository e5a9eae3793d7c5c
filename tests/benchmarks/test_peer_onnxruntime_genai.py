"""The onnxruntime-genai peer (``.peers/onnxruntime-genai``) on the quick benchmark models,
against transformers. Skipped unless ``benchmarks/setup_peers.sh onnxruntime-genai`` installed it.

The worker converts the models with onnxruntime-genai's model builder (fp32, CPU) and appends a
never-chosen logit column as the only EOS, so greedy, beam and speculative tokens must equal
transformers' greedy/beam tokens exactly, EOS included; best-of-N samples are checked against
transformers' next-token distribution.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from benchmarks import factory
from benchmarks.peers import OnnxRuntimeGenAIPeer, TransformersPeer, Unsupported
from benchmarks.peers.remote import peers_dir
from benchmarks.workloads import random_prompt, repetitive_prompt

pytestmark = pytest.mark.skipif(
    not OnnxRuntimeGenAIPeer().available(),
    reason="onnxruntime-genai peer not installed (setup_peers.sh onnxruntime-genai)")
VOCAB = factory.QUICK.vocab


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return factory.build_models(tmp_path_factory.mktemp("models"), factory.QUICK, perturb=0.3)


@pytest.fixture(scope="module")
def peer(paths):
    p = OnnxRuntimeGenAIPeer()
    p.load(paths)
    yield p
    p.close()
    forget_conversions(peers_dir() / p.env / "models", paths["target"].parent)


def forget_conversions(cache, models_root) -> None:
    """Remove the cached conversions of the throwaway models under ``models_root`` (each
    records its source in ``converted.ok``) and the speculative composites linking them."""
    if not cache.is_dir():
        return
    for d in list(cache.iterdir()):
        done = d / "converted.ok"
        if done.is_file() and str(models_root) in done.read_text():
            for spec in cache.glob(f"spec-*{d.name}*"):
                shutil.rmtree(spec)
            shutil.rmtree(d)


@pytest.fixture(scope="module")
def ref(paths):
    p = TransformersPeer()
    p.load(paths)
    return p


@pytest.mark.parametrize("model", ["target", "good_target", "draft"])
def test_greedy_equals_transformers(peer, ref, model):
    prompt = random_prompt(40, VOCAB, 11)
    got = peer.greedy(model, prompt, 24)
    assert len(got) == 24
    assert got == ref.greedy(model, prompt, 24)
    assert peer.greedy(model, prompt, 1) == got[:1]
    assert peer.greedy(model, prompt[:1], 5) == ref.greedy(model, prompt[:1], 5)  # 1-token prompt


def test_greedy_does_not_stop_at_eos(peer, ref):
    """A prompt whose greedy continuation emits EOS (id 2): the peer must go on to max_new
    tokens and agree with transformers, which treats EOS as a plain token (no masking either)."""
    eos = 2
    for seed in range(200):
        prompt = random_prompt(8, VOCAB, 1000 + seed)
        want = ref.greedy("target", prompt, 30)
        if eos in want:
            break
    else:
        pytest.skip("no greedy continuation with EOS found in 200 prompts")
    assert peer.greedy("target", prompt, 30) == want


@pytest.mark.parametrize("width", [2, 4])
def test_beam_equals_transformers(peer, ref, width):
    prompt = random_prompt(16, VOCAB, 12)
    got = peer.beam("target", prompt, width, 10)
    assert len(got) == 10
    assert got == ref.beam("target", prompt, width, 10)


def test_speculative_draft_equals_greedy(peer, ref):
    prompt = random_prompt(24, VOCAB, 4)
    want = ref.greedy("good_target", prompt, 20)
    for k in (1, 3):
        assert peer.speculative("good_target", prompt, 20, k, "draft") == want
        assert peer.last["rounds"] > 0
    assert peer.speculative("target", prompt, 20, 3, "draft") == ref.greedy("target", prompt, 20)
    with pytest.raises(Unsupported):  # the draft cannot draft for itself
        peer.speculative("draft", prompt, 20, 3, "draft")


def test_speculative_ngram_equals_greedy_and_accepts(peer, ref):
    """Prompt lookup on a prompt that repeats a 12-token segment: same tokens as greedy, and
    the lookup proposes something (rounds > 0)."""
    prompt = repetitive_prompt(48, VOCAB, 5, period=12)
    want = ref.greedy("target", prompt, 20)
    assert peer.speculative("target", prompt, 20, 3, "ngram") == want
    assert peer.last["rounds"] > 0


def test_best_of_n_exact_length_and_seeded(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert len(a) == 4 and all(len(s) == 8 and all(0 <= t < VOCAB for t in s) for s in a)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert len({tuple(s) for s in a}) > 1
    assert peer.last["prefill_tokens"] == 4 * len(prompt)  # no shared prefill: said, not hidden


def test_best_of_n_first_tokens_follow_the_model(peer, ref):
    """256 first tokens of temperature-1 samples (8 generators of 32 rows) vs transformers'
    softmax: the count of each of the 3 most likely tokens is Binomial(256, p); it must lie within
    5 standard deviations (+1) of 256 p (a false alarm has probability < 2e-6)."""
    prompt = random_prompt(12, VOCAB, 14)
    n = 256
    samples = peer.best_of_n("target", prompt, n, 1, seed=0)
    assert len(samples) == n
    firsts = [s[0] for s in samples]
    with torch.inference_mode():
        logits = ref.models["target"](torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    for tok in probs.topk(3).indices.tolist():
        p = float(probs[tok])
        count = sum(t == tok for t in firsts)
        assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (tok, count, n * p)
