"""The committed testbed models load with plain transformers and behave as their contracts say."""

import json

import pytest
import torch

from metagen.testbed import format_prompt, grade, make_problems, model_path
from metagen.testbed.tokenizer import Codec


def _need(name):
    path = model_path(name)
    if not (path / "model.safetensors").exists():
        pytest.skip(f"{name} not trained yet (metagen testbed train --only {name})")
    return path


def test_sizes_within_budget():
    # the shipped folders stay small: policy, ORM, PRM and the reviser (the policy fine-tuned
    # to revise an attempt: revision chains need a model trained for them, the policy cannot
    # follow a revision prompt) ~7.5 MB each, the family's draft 1.1 MB and policy-s 3.7 MB,
    # 34.9 MB in all; a larger family member is not shipped here
    total = sum(f.stat().st_size for f in model_path("policy").parent.rglob("*") if f.is_file())
    assert total <= 36 * 1024 * 1024


@pytest.mark.parametrize("name", ["policy", "draft"])
def test_causal_lms_load_and_solve_some(name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _need(name)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and "head_dim" in cfg
    assert "rope_theta" in cfg["rope_parameters"]
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    from metagen.testbed.paths import is_well_formed

    probs = make_problems("test", 6, difficulties=(1,))
    formed = 0
    for p in probs:
        ids = tok(format_prompt(p), return_tensors="pt")["input_ids"]
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40,
                             do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        formed += is_well_formed(text)
        grade(text, p.answer)  # gradable (accuracy is measured by `metagen testbed eval`)
    assert formed >= 5  # the models write the solution format


def test_policy_accuracy_falls_with_difficulty():
    """Golden quality check of the committed policy (greedy, 24 test problems per difficulty):
    measured 0.97+ at difficulty 1 and below 0.2 at difficulty 6 over 500 problems, so these
    bounds leave a wide margin for the run-to-run variation of a 24-problem sample."""
    from metagen.testbed.evaluate import greedy_eval
    from metagen.testbed.modeling import load_model

    model = load_model("policy", _need("policy"))
    easy = greedy_eval(model, make_problems("test", 24, difficulties=(1,)))["greedy_accuracy"]
    hard = greedy_eval(model, make_problems("test", 24, difficulties=(6,)))["greedy_accuracy"]
    assert easy >= 0.7 and hard <= 0.5 and easy > hard


def test_draft_is_5x_smaller():
    from transformers import AutoModelForCausalLM

    pol = AutoModelForCausalLM.from_pretrained(_need("policy"))
    dra = AutoModelForCausalLM.from_pretrained(_need("draft"))
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(pol) >= 5 * n(dra)


def test_reward_model_contracts():
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    orm = AutoModelForCausalLM.from_pretrained(_need("orm"))  # a generative verifier
    prm = AutoModelForTokenClassification.from_pretrained(_need("prm"))
    assert type(orm).__name__ == "LlamaForCausalLM"
    assert type(prm).__name__ == "LlamaForTokenClassification"
    assert prm.config.num_labels == 1
    assert orm.config.vocab_size == prm.config.vocab_size == Codec().size


def test_orm_ranks_policy_samples_of_the_same_problem():
    """Within-problem ranking on the policy's own samples (what best-of-N needs): over mixed
    (one right, one wrong) sample pairs of 300 test problems, the ORM's confidence prefers the
    right one in >= 65 % of pairs. Were it uninformative (p = 0.5), P(>= 65 %) over >= 50 pairs
    is < 0.02 (binomial tail); measured here: 0.786 on 56 pairs."""
    from metagen.scorers import LikelihoodVerifier

    mixed, acc = _pair_accuracy_on_policy_samples(
        LikelihoodVerifier.from_pretrained(_need("orm"), batch_size=64))
    assert mixed >= 50 and acc is not None and acc >= 0.65, (mixed, acc)


def _pair_accuracy_on_policy_samples(scorer):
    """Two policy samples (T = 0.8, seed 7) of each of 300 test problems: the number of mixed
    (one right, one wrong) pairs and ``scorer``'s accuracy over them."""
    from metagen.testbed.eval_all import pair_accuracy
    from metagen.testbed.modeling import load_model
    from metagen.testbed.sampler import sample

    policy = load_model("policy", _need("policy"))
    probs = make_problems("test", 300, seed=0)
    prompts = [format_prompt(p) for p in probs for _ in range(2)]
    outs = sample(policy, prompts, temperature=0.8, seed=7)
    labels = [grade(o, probs[i // 2].answer) for i, o in enumerate(outs)]
    mixed = sum(labels[i] != labels[i + 1] for i in range(0, len(labels), 2))
    return mixed, pair_accuracy(scorer.score(prompts, [o or " " for o in outs]), labels)


QUALITY = pytest.mark.xfail(strict=False, reason=(
    "known gap: the trained PRM does not rank solutions of the same problem (within-problem "
    "pair accuracy ~0.5, see metagen/testbed/README.md, Known limitations)"))


@QUALITY
def test_prm_flags_the_first_wrong_step():
    from transformers import AutoModelForTokenClassification

    from metagen.testbed.metrics import split_steps
    from metagen.testbed.train_rm import step_end_positions

    path = _need("prm")
    model = AutoModelForTokenClassification.from_pretrained(path).eval()
    assert model.config.num_labels == 1
    codec = Codec()
    wins = 0
    probs = make_problems("test", 12, difficulties=(3,))
    for p in probs:
        steps = split_steps(p.solutions[0])
        wrong = list(steps)
        a, rest = wrong[0].rsplit("= ", 1)
        wrong[0] = f"{a}= {int(rest) + 10}\n"  # an arithmetic slip in step 1
        with torch.no_grad():
            def scores(st):
                ids, pos = step_end_positions(codec, format_prompt(p), st)
                logits = model(input_ids=torch.tensor([ids])).logits[0, :, 0]
                return torch.sigmoid(logits[pos]).tolist()
            wins += scores(steps)[0] > scores(wrong)[0]
    assert wins >= 9


def test_step_head_ranks_policy_samples_of_the_same_problem():
    """The trained PRM (the step-value head over the ORM's and policy-s's confidences) on the
    ORM test's sample pairs: it prefers the right sample of a mixed pair in >= 65 % of >= 50
    pairs (uninformative, p = 0.5: P(>= 65 %) < 0.02, binomial tail)."""
    from metagen.scorers.confidence_head import ConfidenceHeadPRM

    if not (model_path("prm-head") / "config.json").is_file():
        pytest.skip("prm-head not trained yet (metagen testbed train --only prm-head)")
    mixed, acc = _pair_accuracy_on_policy_samples(
        ConfidenceHeadPRM.from_folder(model_path("prm-head")))
    assert mixed >= 50 and acc is not None and acc >= 0.65, (mixed, acc)


def test_step_head_scores_a_slipped_step_below_the_right_one():
    """A +10 slip in the first line of 30 difficulty-3 reference solutions: the head's first
    step score falls in >= 22 of 30 (uninformative, p = 0.5: P(>= 22 of 30) < 0.01)."""
    from metagen.scorers.confidence_head import ConfidenceHeadPRM
    from metagen.testbed.metrics import split_steps

    if not (model_path("prm-head") / "config.json").is_file():
        pytest.skip("prm-head not trained yet (metagen testbed train --only prm-head)")
    head = ConfidenceHeadPRM.from_folder(model_path("prm-head"))
    prompts, right, wrong = [], [], []
    for p in make_problems("test", 30, difficulties=(3,)):
        steps = split_steps(p.solutions[0])
        a, rest = steps[0].rsplit("= ", 1)
        prompts.append(format_prompt(p))
        right.append(steps)
        wrong.append([f"{a}= {int(rest) + 10}\n", *steps[1:]])
    good = head.score_steps(prompts, right)
    bad = head.score_steps(prompts, wrong)
    wins = sum(g[0] > b[0] for g, b in zip(good, bad))
    assert wins >= 22, wins
