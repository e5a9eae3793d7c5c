"""Training of the process reward model (PRM) from policy samples.

It starts from the policy's weights (same backbone) with a fresh 1-output head:
``LlamaForTokenClassification`` (num_labels=1) on ``prompt + steps``; at the last token of each
step (its ``\\n``), BCE against the Monte-Carlo value of that prefix (Math-Shepherd, Wang et al.
2024). Other positions carry no loss.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from metagen.errors import InvalidParameterError
from metagen.testbed.problems import format_prompt
from metagen.testbed.rm_data import StepSample
from metagen.testbed.tokenizer import Codec
from metagen.testbed.train_lm import optimizer_step


@dataclass(frozen=True, slots=True)
class RMTrainConfig:
    epochs: int = 2
    batch: int = 32
    lr: float = 5e-4
    warmup: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch", "warmup"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise InvalidParameterError(name, v, "must be a positive integer")


def step_end_positions(codec: Codec, prompt: str, steps: list[str] | tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Token ids of ``prompt + "".join(steps)`` (with BOS) and, for each step, the index of the
    token that holds the step's last character."""
    text = prompt + "".join(steps)
    enc = codec.tok.encode(text)
    ends, pos = [], len(prompt)
    for s in steps:
        pos += len(s)
        ends.append(pos - 1)  # char index of the step's last character
    out, j = [], 0
    for e in ends:
        while j < len(enc.offsets) and not (enc.offsets[j][0] <= e < enc.offsets[j][1]):
            j += 1
        out.append(min(j, len(enc.ids) - 1))
    return enc.ids, out


def _pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, mask  # (B, T) right-padded


def _lr(step: int, total: int, cfg: RMTrainConfig) -> float:
    import math
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))


def _init(cls, policy_dir: str | Path):
    model = cls.from_pretrained(policy_dir, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = Codec().pad
    return model


def _loop(model, n: int, cfg: RMTrainConfig, loss_fn: Callable[[list[int]], torch.Tensor],
          progress: Callable[[int, float], None] | None) -> None:
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    order = list(range(n))
    total = cfg.epochs * ((n + cfg.batch - 1) // cfg.batch)
    step = 0
    model.train()
    for _ in range(cfg.epochs):
        rng.shuffle(order)
        for i in range(0, n, cfg.batch):
            for g in opt.param_groups:
                g["lr"] = _lr(step, total, cfg)
            optimizer_step(model, opt, loss_fn(order[i:i + cfg.batch]), step, progress)
            step += 1
    model.eval()


def train_prm(policy_dir: str | Path, data: list[StepSample], cfg: RMTrainConfig,
              progress: Callable[[int, float], None] | None = None):
    from transformers import LlamaForTokenClassification

    torch.manual_seed(cfg.seed)
    codec = Codec()
    model = _init(LlamaForTokenClassification, policy_dir)
    enc = [step_end_positions(codec, format_prompt(d.sample.problem), d.steps) for d in data]

    def loss_fn(idx: list[int]) -> torch.Tensor:
        ids, mask = _pad([enc[i][0] for i in idx], codec.pad)
        logits = model(input_ids=ids, attention_mask=mask).logits[..., 0]  # (B, T)
        rows, cols, target = [], [], []
        for r, i in enumerate(idx):
            for pos, v in zip(enc[i][1], data[i].values):
                rows.append(r); cols.append(pos); target.append(v)
        picked = logits[torch.tensor(rows), torch.tensor(cols)]  # (S,)
        target_t = torch.tensor(target)
        keep = ~torch.isnan(target_t)  # unlabelled steps (nan) carry no loss
        return torch.nn.functional.binary_cross_entropy_with_logits(picked[keep], target_t[keep])

    _loop(model, len(data), cfg, loss_fn, progress)
    return model


@torch.no_grad()
def prm_step_scores(model, prompts: list[str], steps: list[list[str]], batch: int = 64) -> list[list[float]]:
    """Per-step P(on track) = sigmoid(logit at the last token of each step)."""
    codec = Codec()
    out: list[list[float]] = []
    for i in range(0, len(prompts), batch):
        enc = [step_end_positions(codec, p, s) for p, s in zip(prompts[i:i + batch], steps[i:i + batch])]
        ids, mask = _pad([e[0] for e in enc], codec.pad)
        probs = torch.sigmoid(model(input_ids=ids, attention_mask=mask).logits[..., 0])  # (B, T)
        out.extend([probs[r, e[1]].tolist() if e[1] else [] for r, e in enumerate(enc)])
    return out
