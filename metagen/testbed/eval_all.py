"""``metagen testbed eval``: greedy accuracy, draft agreement, ORM and PRM AUROC on a split."""

from __future__ import annotations

from pathlib import Path

import torch

from metagen.testbed.evaluate import greedy_eval, sampled_eval
from metagen.testbed.metrics import auroc, split_steps
from metagen.testbed.modeling import MODELS_DIR, load_model, load_tokenizer
from metagen.testbed.paths import step_is_correct
from metagen.testbed.problems import Problem, format_prompt, grade, make_problems
from metagen.testbed.sampler import sample
from metagen.testbed.tokenizer import Codec


@torch.no_grad()
def draft_agreement(policy, draft, prompts: list[str], completions: list[str]) -> float:
    """Fraction of the policy's greedy tokens that the draft's greedy choice (teacher-forced on
    the same prefix) agrees with, EOS included: the acceptance rate of greedy speculation."""
    codec = Codec()
    agree = total = 0
    for p, c in zip(prompts, completions):
        ids = codec.encode(p + c) + [codec.eos]
        n_prompt = len(codec.encode(p))
        x = torch.tensor([ids])
        pol = policy(input_ids=x).logits[0].argmax(-1)  # (T,)
        dra = draft(input_ids=x).logits[0].argmax(-1)
        span = slice(n_prompt - 1, len(ids) - 1)
        agree += int((pol[span] == dra[span]).sum())
        total += len(ids) - n_prompt
    return agree / max(1, total)


def oracle_step_labels(steps: list[str]) -> list[bool]:
    """True while every step so far is a correct ``a op b = c`` line (the final ``####`` line
    inherits the label of the prefix before it)."""
    ok, out = True, []
    for s in steps:
        v = step_is_correct(s)
        if v is not None:
            ok = ok and v
        elif not s.strip().startswith("####"):
            ok = False
        out.append(ok)
    return out


def pair_accuracy(scores: list[float], labels: list[bool]) -> float | None:
    """Over consecutive sample pairs of the same problem (``2i``, ``2i+1``) with one correct and
    one wrong sample: the fraction in which the correct one scores higher (ties count half).
    Unlike a pooled AUROC, this cannot be won by recognising easy problems, and it is what
    best-of-N needs from a reward model. ``None`` when no pair is mixed."""
    wins, pairs = 0.0, 0
    for i in range(0, len(labels) - 1, 2):
        if labels[i] != labels[i + 1]:
            good, bad = (scores[i], scores[i + 1]) if labels[i] else (scores[i + 1], scores[i])
            wins += 1.0 if good > bad else 0.5 if good == bad else 0.0
            pairs += 1
    return wins / pairs if pairs else None


def evaluate_all(split: str = "test", limit: int = 500, seed: int = 0, rm_limit: int = 200,
                 sc_k: int = 0, temperature: float = 0.8, root: str | Path = MODELS_DIR) -> dict:
    """All metrics as one JSON-able dict (keys: greedy_accuracy, by_difficulty, n, ...)."""
    root = Path(root)
    probs: list[Problem] = make_problems(split, limit, seed=seed)  # type: ignore[arg-type]
    policy = load_model("policy", root / "policy")
    g = greedy_eval(policy, probs)
    res = {k: g[k] for k in ("greedy_accuracy", "by_difficulty", "n")}
    res["split"] = split
    prompts = [format_prompt(p) for p in probs]
    if (root / "draft" / "config.json").exists():
        draft = load_model("draft", root / "draft")
        m = min(len(probs), 100)
        res["draft_agreement"] = draft_agreement(policy, draft, prompts[:m], g["completions"][:m])
        res["draft_params"] = sum(p.numel() for p in draft.parameters())
    res["policy_params"] = sum(p.numel() for p in policy.parameters())
    if sc_k:
        s = sampled_eval(policy, probs, k=sc_k, temperature=temperature, seed=seed)
        res.update({k: v for k, v in s.items()})
    rm_probs = probs[:rm_limit]
    outs = sample(policy, [format_prompt(p) for p in rm_probs for _ in range(2)],
                  temperature=temperature, seed=seed + 7)
    labels = [grade(o, rm_probs[i // 2].answer) for i, o in enumerate(outs)]
    rm_prompts = [format_prompt(rm_probs[i // 2]) for i in range(len(outs))]
    res["rm_samples"] = len(outs)
    res["rm_sample_accuracy"] = sum(labels) / max(1, len(labels))
    # A weak policy yields few correct samples; the *_ref metrics add one reference solution per
    # problem as a positive (the distribution the reward models were trained on).
    ref_outs = [p.solutions[len(p.solutions) // 2] for p in rm_probs]
    ref_prompts = [format_prompt(p) for p in rm_probs]
    mix_outs, mix_prompts, mix_labels = outs + ref_outs, rm_prompts + ref_prompts, labels + [True] * len(ref_outs)
    from metagen.scorers import LikelihoodVerifier
    tokenizer = load_tokenizer("policy", root / "policy")
    if (root / "orm" / "config.json").exists():  # the generative verifier's confidence
        orm = LikelihoodVerifier(load_model("orm", root / "orm"), tokenizer, batch_size=64)
        mix_scores = orm.score(mix_prompts, mix_outs)
        res["orm_auroc"] = auroc(mix_scores[:len(outs)], labels)
        res["orm_auroc_ref"] = auroc(mix_scores, mix_labels)
        res["orm_pair_accuracy"] = pair_accuracy(mix_scores[:len(outs)], labels)
    if (root / "prm" / "config.json").exists():
        from metagen.testbed.train_rm import prm_step_scores
        prm = load_model("prm", root / "prm")
        steps = [split_steps(o) or [o] for o in mix_outs]
        scores = prm_step_scores(prm, mix_prompts, steps)
        flat_s, flat_y = [], []
        for sc, st in zip(scores, steps):
            flat_s.extend(sc)
            flat_y.extend(oracle_step_labels(st))
        res["prm_step_auroc"] = auroc(flat_s, flat_y)
        mins = [min(s) if s else 0.0 for s in scores]
        lasts = [s[-1] if s else 0.0 for s in scores]
        n = len(outs)
        res["prm_min_auroc"] = auroc(mins[:n], labels)
        res["prm_min_pair_accuracy"] = pair_accuracy(mins[:n], labels)
        res["prm_last_auroc"] = auroc(lasts[:n], labels)
        res["prm_min_auroc_ref"] = auroc(mins, mix_labels)
        res["prm_last_auroc_ref"] = auroc(lasts, mix_labels)
    # the policy's own confidence (its weakest token) as a verifier, for comparison
    conf = LikelihoodVerifier(policy, tokenizer, batch_size=64).score(rm_prompts, outs)
    res["confidence_auroc"] = auroc(conf, labels)
    res["confidence_pair_accuracy"] = pair_accuracy(conf, labels)
    return res
