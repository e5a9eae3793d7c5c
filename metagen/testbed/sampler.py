"""A small batched sampler over a transformers causal LM with its KV cache.

Used to make ORM/PRM training data (thousands of samples) and to evaluate the testbed models
before the project's engine exists. Prompts are left-padded; rows stop at EOS; temperature 0 is
greedy. Seeded: the same ``seed`` and batch split give the same samples.
"""

from __future__ import annotations

import torch

from metagen.testbed.tokenizer import Codec as CharCodec


@torch.no_grad()
def _sample_batch(model, codec: CharCodec, prompts: list[str], temperature: float,
                  max_new_tokens: int, gen: torch.Generator | None, device) -> list[str]:
    enc = [codec.encode(p) for p in prompts]
    width = max(len(e) for e in enc)
    ids = torch.full((len(enc), width), codec.pad, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, width - len(e):] = torch.tensor(e)
        mask[i, width - len(e):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    from transformers import DynamicCache

    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                use_cache=True)
    logits = out.logits[:, -1].float()  # (B, V)
    next_pos = pos[:, -1:] + 1  # (B, 1)
    done = torch.zeros(len(enc), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        if temperature <= 0:
            tok = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1)
            tok = torch.multinomial(probs.cpu() if gen is not None else probs, 1,
                                    generator=gen).squeeze(-1).to(device)
        tok = torch.where(done, torch.full_like(tok, codec.eos), tok)
        tokens.append(tok)
        done |= tok == codec.eos
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos,
                    past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1].float()
        next_pos = next_pos + 1
    seqs = torch.stack(tokens, 1).cpu().tolist()  # (B, L)
    return [codec.decode(s) for s in seqs]


def sample(model, prompts: list[str], temperature: float = 0.0, max_new_tokens: int = 160,
           seed: int = 0, batch_size: int = 256) -> list[str]:
    """Completion texts (without EOS) for each prompt, in order. The tokenizer must be the
    testbed's character tokenizer (BOS is prepended)."""
    codec = CharCodec()
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        out.extend(_sample_batch(model, codec, prompts[i:i + batch_size], temperature,
                                 max_new_tokens, gen, device))
    return out
