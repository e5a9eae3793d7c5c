"""lm-evaluation-harness's ``local-completions`` model against a running server, with no
``tokenizer=``: it probes ``/tokenizer_info`` and ``/tokenize``, takes the server's tokenizer
(its "remote" backend), and its greedy generations and log-likelihoods equal the library's on
the same token ids. Skipped when lm-eval is not installed."""

from __future__ import annotations

import asyncio

import pytest

from metagen.types import SamplingParams
from tests.server.conftest import API_KEY, MODEL

lm_eval_utils = pytest.importorskip("lm_eval.utils", reason="pip install lm-eval")
if not hasattr(lm_eval_utils, "RemoteTokenizer"):
    pytest.skip("this lm-eval has no remote tokenizer; pip install -U lm-eval",
                allow_module_level=True)

CONTEXTS = ["Once upon a time", "Lily went to the park. She saw"]
MAX_GEN = 12


@pytest.fixture(scope="module")
def lm(server, served_gen):
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    return LocalCompletionsAPI(model=MODEL, base_url=server.base_url + "/completions",
                               auth_token=API_KEY,
                               header={"Authorization": f"Bearer {API_KEY}"},
                               max_length=served_gen.engine.max_model_len,
                               max_gen_toks=MAX_GEN, num_concurrent=1, max_retries=1)


def _run(gen, ids, params):
    async def run():
        return await gen.asubmit([ids], params).aresult()
    return asyncio.run(run())[0]


def test_lm_eval_takes_the_servers_tokenizer(lm, served_gen):
    tok = served_gen.tokenizer
    assert lm.tokenizer_backend == "remote"
    assert lm.eot_token_id == tok.eos_token_id
    assert lm.tok_encode(CONTEXTS[1]) == tok(CONTEXTS[1], add_special_tokens=False)["input_ids"]


def test_lm_eval_generate_until_equals_the_library(lm, ref_gen):
    from lm_eval.api.instance import Instance
    requests = [Instance("generate_until", {}, (c, {"until": ["\n"], "max_gen_toks": MAX_GEN}),
                         i) for i, c in enumerate(CONTEXTS)]
    got = lm.generate_until(requests)
    tok = ref_gen.tokenizer
    params = SamplingParams(temperature=0, max_tokens=MAX_GEN, stop=("\n", tok.eos_token))
    want = [_run(ref_gen, tok(c, add_special_tokens=False)["input_ids"], params).outputs[0].text
            for c in CONTEXTS]
    assert got == want


def test_lm_eval_loglikelihood_equals_the_library(lm, ref_gen):
    from lm_eval.api.instance import Instance
    pairs = [(CONTEXTS[0], " there was a girl"), (CONTEXTS[1], " a big dog")]
    got = lm.loglikelihood([Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)])
    tok = ref_gen.tokenizer
    for (context, cont), (logprob, greedy) in zip(pairs, got):
        ctx = tok(context, add_special_tokens=False)["input_ids"]
        whole = tok(context + cont, add_special_tokens=False)["input_ids"]
        assert whole[:len(ctx)] == ctx

        async def read(ids=whole):
            return await ref_gen.aprompt_logprobs(ids)
        scores = asyncio.run(read()).logprobs  # of tokens 1.. of the sequence
        assert logprob == pytest.approx(sum(scores[len(ctx) - 1:]), abs=1e-4)
        assert isinstance(greedy, bool)
