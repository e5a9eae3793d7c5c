"""Outcome and process reward models from Hugging Face folders (batched, with usage).

Supported folders (the head is read from ``config.json``'s ``architectures``):

- ``*ForSequenceClassification`` and ``*ForTokenClassification`` (``num_labels`` 1 or 2);
- a causal LM folder whose safetensors also hold a TRL-style value head (``v_head.summary.weight``,
  ``v_head.summary.bias``): the value of the last hidden state.

A score is read at one token position: the last token of the text (outcome reward) or the last
token of each step (process reward). The head is applied to the backbone's final hidden states
ourselves, so padding conventions of the classification classes do not matter. With
``num_labels == 1`` the score is ``sigmoid(logit)`` (the testbed's P(correct)); with 2 labels it
is ``softmax(logits)[1]``; ``transform="none"`` returns raw logits.

Input conventions (the testbed's): the ORM reads ``prompt + completion`` concatenated exactly;
the PRM reads ``prompt + "".join(steps)`` where every step but possibly the last ends with
``"\n"``. Tokenization uses the tokenizer's default special tokens (``add_special_tokens=True``);
a token that straddles a step boundary (BPE merges) counts for the step it starts in. A chat
prompt (a list of messages) is read as the tokenizer's chat template renders the conversation
with the completion (the joined steps) as the assistant's turn, end of turn included, without
added special tokens (the template writes its own); a tokenizer without a chat template raises
``InvalidPromptError`` naming ``prompts`` (:func:`~metagen.scorers.prm_render.layout`).

Rows that share a prompt share one prompt forward pass (its KV cache is repeated over them), so
N samples of one prompt cost one prompt plus N continuations. ``usage``: one ``scorer_calls`` per
``score``/``score_steps`` call, ``scorer_tokens`` = tokens actually computed, FLOPs estimated as
``2 x parameters x scorer_tokens`` (padding excluded).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from metagen.device import model_on
from metagen.errors import InvalidParameterError, InvalidPromptError, ModelLoadError
from metagen.generators.base import Prompt
from metagen.scorers.base import (
    StepAggregation, aggregate_steps, check_same_length, check_step_chains)
from metagen.scorers.callables import check_scores
from metagen.scorers.interrupt import check_interrupt
from metagen.scorers.prm_render import Layout, layout
from metagen.scorers.usage import UsageMeter
from metagen.types import Usage

if TYPE_CHECKING:
    import torch

Transform = Literal["sigmoid", "none"]
Reader = Callable[[Any, list[int], list[int]], list[float]]


def _inference_mode() -> Any:
    import torch
    return torch.inference_mode()


class HFScorer:
    """Shared loading, batching and head evaluation."""

    def __init__(self, model: Any, tokenizer: Any, *, head: Any, batch_size: int = 16,
                 transform: Transform = "sigmoid", add_special_tokens: bool = True) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError("batch_size", batch_size, "must be a positive integer")
        if transform not in ("sigmoid", "none"):
            raise InvalidParameterError("transform", transform, "must be 'sigmoid' or 'none'")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.head = head
        self.batch_size = batch_size
        self.transform = transform
        self.add_special_tokens = add_special_tokens
        self.n_params = sum(p.numel() for p in model.parameters())
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
        self._meter = UsageMeter()
        self._prompt_ids: dict[str, list[int]] = {}

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str = "cpu", dtype: Any = None,
                        **kwargs: Any) -> Any:
        """Load a folder; raises :class:`ModelLoadError` when it is missing or unsupported."""
        model, tokenizer, head = _load(Path(path), device, dtype)
        return cls(model, tokenizer, head=head, **kwargs)

    @property
    def usage(self) -> Usage:
        """Cumulative scorer usage (tokens, calls, FLOPs, wall time)."""
        return self._meter.usage

    def _layout(self, prompt: Prompt, response: str, open_turn: bool = False) -> Layout:
        """The text this scorer reads for ``(prompt, response)`` (see the module docstring)."""
        return layout(self.tokenizer, prompt, response, special=self.add_special_tokens,
                      open_turn=open_turn)

    def _encode(self, text: str, special: bool | None = None) -> Any:
        """Tokens, offsets and special-token mask of ``text``; ``special``: add the tokenizer's
        special tokens (default: the scorer's ``add_special_tokens``)."""
        special = self.add_special_tokens if special is None else special
        enc = self.tokenizer(text, add_special_tokens=special,
                             return_offsets_mapping=True, return_special_tokens_mask=True)
        n = len(enc["input_ids"])
        if n == 0:
            raise InvalidPromptError("text", text[:80], "tokenizes to no tokens")
        if self.max_length is not None and n > self.max_length:
            raise InvalidPromptError(
                "text", f"<{n} tokens>", f"longer than the scorer's context {self.max_length}")
        return enc

    def _values(self, ids: list[list[int]], positions: list[list[int]],
                prefixes: list[int] | None = None, read: Reader | None = None
                ) -> list[list[float]]:
        """Head outputs at the given token positions of each sequence.

        ``prefixes[r]`` is the length of row r's prompt prefix (0: none). Rows with the same
        prompt prefix share ONE prompt forward pass: its KV cache is repeated over the rows and
        only their continuations are computed (what an engine's prefix cache does); the others
        run in length-sorted padded batches. ``read`` turns the hidden states at a row's
        positions into its values (default :meth:`_head_scores`). Inside an
        :func:`~metagen.scorers.interrupt.interruptible` block whose flag gets set, raises
        :class:`~metagen.errors.CallCancelled` before the next batch.
        """
        out: list[list[float]] = [[] for _ in ids]
        prefixes = prefixes or [0] * len(ids)
        groups: dict[tuple[int, ...], list[int]] = {}
        plain = []
        for r, p in enumerate(prefixes):
            if p > 0 and ids[r][:p] and all(q >= p - 1 for q in positions[r]):
                groups.setdefault(tuple(ids[r][:p]), []).append(r)
            else:
                plain.append(r)
        who = f"{type(self).__name__} scoring"
        read = read or self._head_scores
        with self._meter.timed(), _inference_mode():
            for prefix, rows in groups.items():
                for start in range(0, len(rows), self.batch_size):
                    check_interrupt(who)
                    self._shared_batch(list(prefix), rows[start:start + self.batch_size], ids,
                                       positions, out, read)
            plain.sort(key=lambda r: len(ids[r]))
            for start in range(0, len(plain), self.batch_size):
                check_interrupt(who)
                self._plain_batch(plain[start:start + self.batch_size], ids, positions, out,
                                  read)
        self._meter.add(0, 0.0, calls=1)  # one scorer call per score()/score_steps()
        return out

    def _plain_batch(self, rows: list[int], ids: list[list[int]],
                     positions: list[list[int]], out: list[list[float]], read: Reader) -> None:
        import torch

        width = max(len(ids[r]) for r in rows)
        batch = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T), right padded
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            batch[b, :len(ids[r])] = torch.tensor(ids[r])
            mask[b, :len(ids[r])] = 1
        hidden = self.model.base_model(input_ids=batch.to(self.device),
                                       attention_mask=mask.to(self.device)).last_hidden_state
        for b, r in enumerate(rows):  # hidden: (B, T, H)
            out[r] = read(hidden[b, positions[r]], ids[r], positions[r])
        tokens = sum(len(ids[r]) for r in rows)
        self._meter.add(tokens, 2.0 * self.n_params * tokens, calls=0)

    def _shared_batch(self, prefix: list[int], rows: list[int], ids: list[list[int]],
                      positions: list[list[int]], out: list[list[float]], read: Reader
                      ) -> None:
        import torch

        p = len(prefix)
        pre = self.model.base_model(input_ids=torch.tensor([prefix], device=self.device),
                                    use_cache=True)
        tails = [ids[r][p:] for r in rows]
        width = max(len(t) for t in tails)
        hidden = None
        if width:
            cache = pre.past_key_values
            cache.batch_repeat_interleave(len(rows))
            batch = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T) continuations
            mask = torch.zeros((len(rows), p + width), dtype=torch.long)  # (B, P + T)
            mask[:, :p] = 1
            for b, tail in enumerate(tails):
                batch[b, :len(tail)] = torch.tensor(tail, dtype=torch.long)
                mask[b, p:p + len(tail)] = 1
            hidden = self.model.base_model(
                input_ids=batch.to(self.device), attention_mask=mask.to(self.device),
                past_key_values=cache, use_cache=True).last_hidden_state  # (B, T, H)
        for b, r in enumerate(rows):
            picked = [pre.last_hidden_state[0, q] if q < p else hidden[b, q - p]  # type: ignore
                      for q in positions[r]]
            out[r] = read(torch.stack(picked), ids[r], positions[r])
        tokens = p + sum(len(t) for t in tails)
        self._meter.add(tokens, 2.0 * self.n_params * tokens, calls=0)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def _head_scores(self, picked: Any, ids: list[int], positions: list[int]) -> list[float]:
        """(S, H) hidden states at ``positions`` of the row ``ids`` -> S scores."""
        logits = self.head(picked.to(self.head.weight.dtype)).float()  # (S, L)
        return self._to_scores(logits)

    def _prefix_len(self, prompt: str, full_ids: list[int], special: bool | None = None) -> int:
        """Token length of the prompt text when the full text's tokens start with the prompt's
        own tokens (no merge across the boundary), else 0 (no sharing for that row)."""
        special = self.add_special_tokens if special is None else special
        key = ("s" if special else "n") + prompt
        cached = self._prompt_ids.get(key)
        if cached is None:
            cached = list(self.tokenizer(prompt, add_special_tokens=special)["input_ids"])
            if len(self._prompt_ids) > 4096:
                self._prompt_ids.clear()
            self._prompt_ids[key] = cached
        n = len(cached)
        return n if n and full_ids[:n] == cached else 0

    def _to_scores(self, logits: Any) -> list[float]:  # (S, L) -> S scores
        if self.transform == "none":
            if logits.shape[-1] != 1:
                raise ModelLoadError("transform='none' needs a single-logit head")
            return logits[:, 0].tolist()
        if logits.shape[-1] == 1:
            return logits[:, 0].sigmoid().tolist()
        if logits.shape[-1] == 2:
            return logits.softmax(-1)[:, 1].tolist()
        raise ModelLoadError(f"a reward head needs 1 or 2 labels, this one has {logits.shape[-1]}")


class HFRewardModel(HFScorer):
    """Outcome reward model: ``score(prompts, completions)`` reads ``prompt + completion`` (a
    chat prompt: the conversation with the completion as the assistant's turn), scored at its
    last token."""

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        if not prompts:
            return []
        ids, positions, prefixes = [], [], []
        for prompt, completion in zip(prompts, completions):
            lay = self._layout(prompt, completion)
            enc = self._encode(lay.text, lay.special)
            ids.append(list(enc["input_ids"]))
            positions.append([len(enc["input_ids"]) - 1])
            prefixes.append(self._prefix_len(lay.prefix, ids[-1], lay.special))
        values = self._values(ids, positions, prefixes)
        return check_scores([v[0] for v in values], len(prompts), who="HFRewardModel")

    def pool(self, ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """vLLM ``/pooling`` of a sequence classifier over token ids: per row, the head's class
        vector at the last token with the activation vLLM applies (one label: sigmoid; more:
        softmax; ``transform="none"``: the raw logits). For the tokens :meth:`score` reads, the
        positive label's entry is its score (computed without prompt sharing: equal up to
        float rounding). ``InvalidPromptError`` naming ``input`` for an empty row, a token
        outside the vocabulary or a row longer than the context."""
        rows = [list(row) for row in ids]
        vocab = int(getattr(self.model.config, "vocab_size", 0) or 0)
        for i, row in enumerate(rows):
            if not row or any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab
                              for t in row):
                raise InvalidPromptError("input", f"<row {i}>", f"must be a non-empty list of "
                                         f"token ids in [0, {vocab})")
            if self.max_length is not None and len(row) > self.max_length:
                raise InvalidPromptError("input", f"<row {i}: {len(row)} tokens>",
                                         f"longer than the scorer's context {self.max_length}")
        if not rows:
            return []
        return self._values(rows, [[len(row) - 1] for row in rows], read=self._class_vector)

    def _class_vector(self, picked: Any, ids: list[int], positions: list[int]) -> list[float]:
        """(1, H) hidden state at the last token -> the activated class vector."""
        logits = self.head(picked.to(self.head.weight.dtype)).float()[0]  # (L,)
        if self.transform == "none":
            return logits.tolist()
        return (logits.sigmoid() if logits.shape[-1] == 1 else logits.softmax(-1)).tolist()


class HFProcessRewardModel(HFScorer):
    """Process reward model: one score per step (the value at the step's last token).

    ``score(prompts, completions)`` makes it usable as an outcome reward too: the completion is
    split into lines (each keeps its ``"\n"``) and the step scores are aggregated with
    ``aggregation`` (last | min | prod | mean).
    """

    def __init__(self, model: Any, tokenizer: Any, *, aggregation: StepAggregation = "last",
                 **kwargs: Any) -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        super().__init__(model, tokenizer, **kwargs)
        self.aggregation = aggregation

    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        check_step_chains(prompts, steps)
        ids, positions, prefixes = [], [], []
        for prompt, chain in zip(prompts, steps):
            lay = self._layout(prompt, "".join(chain))
            enc = self._encode(lay.text, lay.special)
            ids.append(list(enc["input_ids"]))
            positions.append(step_positions(lay.step_ends(chain), enc))
            prefixes.append(self._prefix_len(lay.prefix, ids[-1], lay.special))
        values = self._values(ids, positions, prefixes)
        return [check_scores(v, len(chain), who="HFProcessRewardModel")
                for v, chain in zip(values, steps)]

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        steps = [split_steps(c) for c in completions]
        if any(not s for s in steps):
            raise InvalidParameterError("completions", "''", "an empty completion has no steps")
        per_step = self.score_steps(prompts, steps)
        return [aggregate_steps(scores, self.aggregation) for scores in per_step]


def split_steps(text: str) -> list[str]:
    """Lines of ``text`` split at ``"\n"`` only (never ``splitlines``), each keeping its
    ``"\n"``; a trailing empty piece is dropped."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def step_positions(ends: Sequence[int], enc: Any) -> list[int]:
    """Token index of the last token of each step, whose end is the character offset ``ends[k]``
    of the encoded text (the last non-special token starting before it)."""
    starts = [start for (start, _), special in zip(enc["offset_mapping"],
                                                   enc["special_tokens_mask"])
              if not special]
    index = [i for i, special in enumerate(enc["special_tokens_mask"]) if not special]
    positions, t = [], 0
    for end in ends:
        while t + 1 < len(starts) and starts[t + 1] < end:
            t += 1
        positions.append(index[t])
    return positions


def _load(path: Path, device: str, dtype: Any) -> tuple[Any, Any, Any]:
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path}: not a Hugging Face model folder (no config.json)")
    try:
        import transformers as tf
        archs = json.loads((path / "config.json").read_text()).get("architectures") or []
        tokenizer = tf.AutoTokenizer.from_pretrained(path)
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{path}: reward scorers need a fast tokenizer (offsets)")
        kwargs = {"dtype": dtype} if dtype is not None else {}
        if any(a.endswith("ForSequenceClassification") for a in archs):
            model = tf.AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        elif any(a.endswith("ForTokenClassification") for a in archs):
            model = tf.AutoModelForTokenClassification.from_pretrained(path, **kwargs)
        else:
            model = tf.AutoModelForCausalLM.from_pretrained(path, **kwargs)
            return model_on(model, device), tokenizer, _value_head(path, model).to(device)
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"{path}: cannot load reward model: {exc}") from exc
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if head is None or not hasattr(head, "weight"):
        raise ModelLoadError(
            f"{path}: no linear 'score'/'classifier' head on {type(model).__name__}")
    return model_on(model, device), tokenizer, head


def _value_head(path: Path, model: Any) -> Any:
    import torch
    from safetensors import safe_open

    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            if "v_head.summary.weight" in f.keys():
                weight = f.get_tensor("v_head.summary.weight")  # (L, H)
                bias = f.get_tensor("v_head.summary.bias") if "v_head.summary.bias" in f.keys() \
                    else None
                head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
                with torch.no_grad():
                    head.weight.copy_(weight)
                    if bias is not None:
                        head.bias.copy_(bias)
                return head.to(next(model.parameters()).dtype)
    raise ModelLoadError(f"{path}: neither a classification model nor a causal LM with a "
                         "value head (v_head.summary.weight)")
