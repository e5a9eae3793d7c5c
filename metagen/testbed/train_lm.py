"""Training of the testbed's causal LMs (policy and draft) from scratch on the problem stream.

Sequences ``<bos> prompt solution <eos>`` (a random solution path per example) are packed whole
into fixed-length rows (attention may see earlier examples of the row, never a cut one), or one
per row (``pack=False``). The loss weights solution tokens 1 and prompt tokens ``prompt_weight``
(default 1: modelling the question too made the copying of its numbers come much earlier).
AdamW, linear warmup then cosine decay. Deterministic given the seed (on one device and thread
count).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from metagen.device import model_on
from metagen.errors import InvalidParameterError
from metagen.testbed.modeling import POLICY_ARCH, ArchConfig, save_model_folder
from metagen.testbed.problems import DEFAULT_DIFFICULTIES, format_prompt, iter_problems
from metagen.testbed.tokenizer import Codec


@dataclass(frozen=True, slots=True)
class LMTrainConfig:
    arch: ArchConfig = field(default_factory=lambda: POLICY_ARCH)
    steps: int = 2400
    batch: int = 8
    block: int = 256
    lr: float = 3e-3
    min_lr_frac: float = 0.05
    warmup: int = 50
    weight_decay: float = 0.1
    prompt_weight: float = 1.0
    drill_frac: float = 0.25
    pack: bool = True  # False: one example per row (no cross-example attention), ``batch`` examples
    restart_steps: int = 0  # a second cosine cycle with a fresh optimizer (warm restart)
    restart_lr: float = 2e-3
    seed: int = 0
    difficulties: tuple[int, ...] = DEFAULT_DIFFICULTIES

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "block", "warmup"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise InvalidParameterError(name, v, "must be a positive integer")
        if not 0 < self.lr < 1:
            raise InvalidParameterError("lr", self.lr, "must be in (0, 1)")
        if not 0 <= self.drill_frac < 1:
            raise InvalidParameterError("drill_frac", self.drill_frac, "must be in [0, 1)")
        if not 0 <= self.prompt_weight <= 1:
            raise InvalidParameterError("prompt_weight", self.prompt_weight, "must be in [0, 1]")


def example_stream(seed: int, difficulties, prompt_weight: float,
                   drill_frac: float = 0.0) -> Iterator[tuple[list[int], list[float]]]:
    """Endless training examples (token ids with BOS and EOS, loss weights), train split only.

    With probability ``drill_frac`` an example is an arithmetic drill instead: BOS and eight
    solution lines of other problems, no question, loss only on each result (after ``=``). Drills
    give the arithmetic many more examples per token than whole problems do."""
    codec = Codec()
    rng = random.Random(f"lm-paths:{seed}")
    eq = codec.encode(" =", bos=False)[-1]
    problems = iter_problems("train", seed, difficulties)
    while True:
        if drill_frac and rng.random() < drill_frac:
            lines: list[str] = []
            while len(lines) < 8:
                p = next(problems)
                lines.extend(ln + "\n" for ln in rng.choice(p.solutions).split("\n")[:-1])
            ids, wts, after_eq = [codec.bos], [0.0], False
            for t in codec.encode("".join(lines[:8]), bos=False):
                ids.append(t)
                wts.append(1.0 if after_eq else 0.0)
                after_eq = (after_eq or t == eq) and t != codec.newline
            yield ids, wts
            continue
        p = next(problems)
        prompt = codec.encode(format_prompt(p))
        sol = codec.encode(rng.choice(p.solutions), bos=False) + [codec.eos]
        yield prompt + sol, [prompt_weight] * len(prompt) + [1.0] * len(sol)


Example = tuple[list[int], list[float]]  # token ids (BOS ... EOS), a loss weight per token


def training_rows(cfg: LMTrainConfig, stream: Iterator[Example] | None = None
                  ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Training rows ``(ids, weights)``, packed or one example per row (``cfg.pack``), from
    ``stream`` (default: :func:`example_stream` of ``cfg``)."""
    if stream is None:
        stream = example_stream(cfg.seed, cfg.difficulties, cfg.prompt_weight, cfg.drill_frac)
    return _packed_batches(cfg, stream) if cfg.pack else _single_batches(cfg, stream)


def _single_batches(cfg: LMTrainConfig, stream: Iterator[Example]
                    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``batch`` examples per step, one per row starting at position 0 as at inference, right
    padded to the longest (weight 0): no example ever attends to another one."""
    pad = Codec().pad
    while True:
        exs = [next(stream) for _ in range(cfg.batch)]
        width = min(cfg.block + 1, max(len(t) for t, _ in exs))
        ids = torch.full((cfg.batch, width), pad, dtype=torch.long)
        w = torch.zeros((cfg.batch, width))
        for r, (tok, wt) in enumerate(exs):
            tok, wt = tok[:width], wt[:width]
            ids[r, :len(tok)] = torch.tensor(tok)
            w[r, :len(tok)] = torch.tensor(wt)
        yield ids, w


def _packed_batches(cfg: LMTrainConfig, stream: Iterator[Example]
                    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Rows of ``block + 1`` tokens holding whole examples only (an example is never split, so
    every solution token sees its question). Rows are filled first-fit from a buffer of 32
    upcoming examples; what is left of a row is padding with weight 0."""
    pad = Codec().pad
    width = cfg.block + 1
    buffer: list[tuple[list[int], list[float]]] = []
    while True:
        ids = torch.full((cfg.batch, width), pad, dtype=torch.long)
        w = torch.zeros((cfg.batch, width))
        for r in range(cfg.batch):
            pos = 0
            while True:
                while len(buffer) < 32:
                    ex = next(stream)
                    buffer.append((ex[0][:width], ex[1][:width]))
                j = next((i for i, ex in enumerate(buffer) if pos + len(ex[0]) <= width), None)
                if j is None:
                    break
                tok, wt = buffer.pop(j)
                ids[r, pos:pos + len(tok)] = torch.tensor(tok)
                w[r, pos:pos + len(tok)] = torch.tensor(wt)
                pos += len(tok)
        yield ids, w


def lr_at(step: int, cfg: LMTrainConfig) -> float:
    """Linear warmup to ``lr``, then cosine to ``min_lr_frac * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def _optimizer(model, lr: float, weight_decay: float):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def train_lm(cfg: LMTrainConfig, out_dir: str | Path | None = None, device: str = "cpu",
             progress: Callable[[int, float], None] | None = None,
             checkpoint: Callable[[int, object], None] | None = None, checkpoint_every: int = 0,
             resume_stage1: str | Path | None = None):
    """Train a LlamaForCausalLM from scratch; save it (fp32 safetensors + tokenizer) to
    ``out_dir`` if given. Two cosine cycles: ``steps`` at ``lr``, then ``restart_steps`` at
    ``restart_lr`` with a fresh AdamW (warm restart, Loshchilov & Hutter 2017) on the continuing
    data stream. ``resume_stage1`` (a folder saved after the first cycle) skips the first cycle,
    fast-forwarding the data stream, which gives the same result. ``progress(step, loss)`` is
    called after every step and ``checkpoint(step, model)`` every ``checkpoint_every`` steps."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    model = model_on(LlamaForCausalLM(cfg.arch.llama_config()), device)
    batches = training_rows(cfg)
    stages = [(0, cfg.steps, cfg.lr, cfg.warmup)]
    if cfg.restart_steps:
        stages.append((cfg.steps, cfg.restart_steps, cfg.restart_lr, cfg.warmup))
    if resume_stage1 is not None:
        model = model_on(LlamaForCausalLM.from_pretrained(resume_stage1, dtype=torch.float32), device)
        for _ in range(cfg.steps):
            next(batches)
        stages = stages[1:]
    model.train()
    for offset, n_steps, lr, warmup in stages:
        train_cycle(model, batches, cfg, n_steps, lr, warmup, offset=offset, device=device,
                    progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every)
    model.eval()
    if out_dir is not None:
        save_model_folder(model, out_dir)
    return model


def optimizer_step(model, opt, loss: torch.Tensor, step: int,
                   progress: Callable[[int, float], None] | None = None) -> None:
    """One optimizer step on ``loss``: gradients clipped at norm 1, then ``progress(step,
    loss)``. The one update rule of the testbed's LM and reward-model training."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if progress is not None:
        progress(step, float(loss.detach()))


def train_cycle(model, batches: Iterator[tuple[torch.Tensor, torch.Tensor]], cfg: LMTrainConfig,
                n_steps: int, lr: float, warmup: int, *, offset: int = 0, device: str = "cpu",
                progress: Callable[[int, float], None] | None = None,
                checkpoint: Callable[[int, object], None] | None = None,
                checkpoint_every: int = 0) -> None:
    """One cosine cycle of ``n_steps`` AdamW steps (a fresh optimizer, warmup ``warmup`` to
    ``lr``, weight decay and ``min_lr_frac`` of ``cfg``) on ``model`` in training mode: each
    step the weighted mean cross-entropy of the next row of ``batches``, gradients clipped at
    norm 1. Step numbers passed to ``progress(step, loss)`` and ``checkpoint(step, model)``
    start at ``offset``."""
    opt = _optimizer(model, lr, cfg.weight_decay)
    sched = LMTrainConfig(arch=cfg.arch, steps=n_steps, lr=lr, warmup=warmup,
                          min_lr_frac=cfg.min_lr_frac)
    for i in range(n_steps):
        step = offset + i
        ids, w = next(batches)
        ids, w = ids.to(device), w.to(device)
        for g in opt.param_groups:
            g["lr"] = lr_at(i, sched)
        logits = model(input_ids=ids[:, :-1]).logits  # (B, T, V)
        loss_tok = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction="none")
        weights = w[:, 1:].reshape(-1)
        loss = (loss_tok * weights).sum() / weights.sum().clamp(min=1.0)
        optimizer_step(model, opt, loss, step, progress)
        if checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0:
            model.eval()
            checkpoint(step + 1, model)
            model.train()
