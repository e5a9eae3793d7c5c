"""Log-likelihood of given continuations under an :class:`~metagen.generators.hf.HFGenerator`.

Each (prompt, continuation) pair becomes one sequence ``ids`` with ``k`` conditioning tokens
(:func:`scored_sequence`); the sequences run through the model in right-padded batches of at most
``max_batch_rows``, and the score is ``sum(log_softmax(logits[t - 1])[ids[t]] for t >= k)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.generators.base import Prompt
from metagen.generators.tokenize import encode_prompt, scored_sequence


def score_pairs(gen: Any, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
                ) -> tuple[list[list[float]], int, float]:
    """Scores ``out[i][j]``, the number of tokens run, and the FLOPs spent."""
    from metagen.generators.base import render_prompt

    tok = gen.tokenizer
    seqs: list[tuple[int, int, list[int], int]] = []  # (i, j, ids, prompt length)
    out: list[list[float]] = []
    for i, (prompt, conts) in enumerate(zip(prompts, continuations)):
        if isinstance(conts, (str, bytes)) or not isinstance(conts, Sequence):
            raise InvalidParameterError("continuations", conts, "each item must be a list of "
                                        "strings")
        p_ids = encode_prompt(tok, prompt)
        p_text = render_prompt(tok, prompt)
        out.append([0.0] * len(conts))
        for j, cont in enumerate(conts):
            if not isinstance(cont, str):
                raise InvalidParameterError("continuations", cont, "must be a string")
            ids, k = scored_sequence(tok, prompt, p_ids, p_text, cont)
            if len(ids) > gen.context_length:
                raise InvalidPromptError(
                    "continuations", f"<{len(ids)} tokens>",
                    f"prompt and continuation take {len(ids)} tokens, more than the model's "
                    f"maximum context length of {gen.context_length}")
            if len(ids) > k:
                seqs.append((i, j, ids, k))
    tokens = sum(len(s[2]) for s in seqs)
    flops = sum(gen.flop_model.forward(0, len(s[2])) for s in seqs)
    for lo in range(0, len(seqs), gen.max_batch_rows):
        chunk = seqs[lo:lo + gen.max_batch_rows]
        for (i, j, _, _), value in zip(chunk, _batch_logprob(gen, chunk)):
            out[i][j] = value
    return out, tokens, flops


@torch.inference_mode()
def _batch_logprob(gen: Any, chunk: list[tuple[int, int, list[int], int]]) -> list[float]:
    width = max(len(s[2]) for s in chunk)
    ids = torch.full((len(chunk), width), gen.pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)            # (B, T)
    for b, (_, _, seq, _) in enumerate(chunk):
        ids[b, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[b, :len(seq)] = 1
    logits = gen.model(input_ids=ids.to(gen.device), attention_mask=mask.to(gen.device)).logits
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    values: list[float] = []
    for b, (_, _, seq, p_len) in enumerate(chunk):
        target = ids[b, p_len:len(seq)].to(logp.device)             # (C,)
        rows = logp[b, p_len - 1:len(seq) - 1]                      # (C, V)
        values.append(float(rows.gather(1, target[:, None]).sum()))
    return values
