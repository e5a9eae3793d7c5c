"""A causal LM's own likelihood as an outcome and a process reward (a confidence verifier).

When a model's wrong answers mostly come from slips — a low-probability token taken while
sampling, carried to the end — the weakest token of a solution is a strong correctness signal.
Self-certainty (Kang et al. 2025) selects best-of-N samples by the model's confidence, DeepConf
(Fu et al. 2025) filters and weights votes by the *lowest group confidence* (the lowest mean
log-probability over a sliding window of tokens), and Xie et al. (2023) guide step-level beam
search with the model's confidence in each step. :class:`LikelihoodVerifier` gives all three
through the scorer protocols, from any causal LM folder (usually the generator's own model):

- ``score(prompts, completions)``: ``exp(agg(logp))`` over the completion's tokens, where
  ``logp[t] = log p(token_t | prompt, earlier tokens)`` under the model (temperature 1) and
  ``agg`` is ``min`` (the weakest token), ``mean`` (the geometric-mean token probability) or
  ``window`` (the lowest mean over ``window`` consecutive tokens; the mean when shorter);
- ``score_steps(prompts, steps)``: step ``i`` scores the completion *so far* (its tokens up to
  the last token of step ``i``) with the same ``agg`` — the confidence that the prefix is still on
  track, non-increasing in ``i`` for ``min``; the last step's score equals ``score``.

A chat prompt (a list of messages) is read as a generator continues it: the chat template of the
conversation with the completion as the assistant's turn, left open (``continue_final_message``).
Scores lie in (0, 1], so they can weight votes. Compute: one forward pass over prompt and
completion per row (rows with the same prompt share the prompt's pass), counted in ``usage`` as
``2 x parameters x tokens``. Scores are read with the model's tokenizer; a token that straddles
the prompt/completion boundary counts for the completion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from metagen.device import model_on
from metagen.errors import InvalidParameterError, InvalidPromptError, ModelLoadError
from metagen.generators.base import Prompt
from metagen.scorers.base import check_same_length, check_step_chains
from metagen.scorers.callables import check_scores
from metagen.scorers.hf_reward import HFScorer, step_positions
from metagen.scorers.prm_render import Layout

Confidence = Literal["min", "mean", "window"]


def lowest_window_mean(values: Sequence[float], window: int) -> float:
    """The lowest mean of ``window`` consecutive values (the mean of all when fewer)."""
    if not values:
        raise InvalidParameterError("values", values, "need at least one value")
    if len(values) <= window:
        return sum(values) / len(values)
    run = sum(values[:window])
    low = run
    for i in range(window, len(values)):
        run += values[i] - values[i - window]
        low = min(low, run)
    return low / window


def confidence(logprobs: Sequence[float], how: Confidence, window: int = 16) -> float:
    """``exp(agg(logprobs))`` in (0, 1] for ``how`` = ``min`` | ``mean`` | ``window``."""
    if not logprobs:
        raise InvalidParameterError("logprobs", logprobs, "need at least one token")
    if how == "min":
        agg = min(logprobs)
    elif how == "mean":
        agg = sum(logprobs) / len(logprobs)
    elif how == "window":
        agg = lowest_window_mean(logprobs, window)
    else:
        raise InvalidParameterError("aggregation", how, "must be one of min, mean, window")
    return math.exp(agg)


class LikelihoodVerifier(HFScorer):
    """Outcome and process scores from a causal LM's token log-probabilities (see module doc)."""

    def __init__(self, model: Any, tokenizer: Any, *, aggregation: Confidence = "min",
                 window: int = 16, batch_size: int = 16) -> None:
        if not isinstance(window, int) or window < 1:
            raise InvalidParameterError("window", window, "must be a positive integer")
        confidence([0.0], aggregation, window)  # validates the mode
        head = model.get_output_embeddings()
        if head is None:
            raise ModelLoadError(f"{type(model).__name__} has no output embeddings (LM head)")
        super().__init__(model, tokenizer, head=head, batch_size=batch_size)
        self.aggregation: Confidence = aggregation
        self.window = window

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str = "cpu", dtype: Any = None,
                        **kwargs: Any) -> LikelihoodVerifier:
        """Load a causal LM folder; raises :class:`ModelLoadError` when it cannot."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path}: not a Hugging Face model folder (no config.json)")
        try:
            import transformers as tf
            tokenizer = tf.AutoTokenizer.from_pretrained(path)
            model = tf.AutoModelForCausalLM.from_pretrained(
                path, **({"dtype": dtype} if dtype is not None else {}))
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"{path}: cannot load a causal LM: {exc}") from exc
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{path}: the likelihood verifier needs a fast tokenizer")
        return cls(model_on(model, device), tokenizer, **kwargs)

    def _head_scores(self, picked: Any, ids: list[int], positions: list[int]) -> list[float]:
        """Log-prob of the token after each position: (S, H) -> S log-probs."""
        import torch

        logits = self.head(picked.to(self.head.weight.dtype)).float()  # (S, V)
        targets = torch.tensor([ids[q + 1] for q in positions], device=logits.device)  # (S,)
        return logits.log_softmax(-1).gather(1, targets[:, None])[:, 0].tolist()

    def _token_logprobs(self, prompts: Sequence[Prompt], texts: Sequence[str]
                        ) -> tuple[list[list[float]], list[Any], list[int], list[Layout]]:
        """Per row: the completion tokens' log-probs, the encoding of the text read (``prompt +
        text``, or the open chat turn), the index of the completion's first token and the
        layout."""
        ids, positions, prefixes, encs, starts, lays = [], [], [], [], [], []
        for prompt, text in zip(prompts, texts):
            if not text:
                raise InvalidPromptError("completions", "''", "an empty completion has no "
                                         "tokens to score")
            lay = self._layout(prompt, text, open_turn=True)
            enc = self._encode(lay.text, lay.special)
            row = list(enc["input_ids"])
            start = next((i for i, ((a, _), special) in enumerate(
                zip(enc["offset_mapping"], enc["special_tokens_mask"]))
                if not special and a >= lay.start), len(row))
            start = min(max(start, 1), len(row) - 1)  # a straddling token counts for the text
            ids.append(row)
            positions.append(list(range(start - 1, len(row) - 1)))
            prefixes.append(min(self._prefix_len(lay.prefix, row, lay.special), start))
            encs.append(enc)
            starts.append(start)
            lays.append(lay)
        return self._values(ids, positions, prefixes), encs, starts, lays

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        if not prompts:
            return []
        logps, _, _, _ = self._token_logprobs(prompts, completions)
        return check_scores([confidence(lp, self.aggregation, self.window) for lp in logps],
                            len(prompts), who="LikelihoodVerifier")

    def step_logprobs(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                      ) -> list[list[list[float]]]:
        """Per chain, per step: the log-probs of the step's tokens under the model (the
        completion is ``"".join(steps)``; a token is the step's whose text holds its last
        character; a step whose tokens all end in an earlier step has none, except that the
        first step always holds the completion's first token). Concatenated, a chain's lists
        are the completion's token log-probs."""
        check_step_chains(prompts, steps)
        if not prompts:
            return []
        logps, encs, starts, lays = self._token_logprobs(prompts, ["".join(c) for c in steps])
        out = []
        for chain, lp, enc, start, lay in zip(steps, logps, encs, starts, lays):
            ends = [max(1, pos - start + 1)
                    for pos in step_positions(lay.step_ends(chain), enc)]
            out.append([lp[a:b] for a, b in zip([0, *ends[:-1]], ends)])
        return out

    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        out = []
        for chain in self.step_logprobs(prompts, steps):
            run: list[float] = []
            scores = []
            for step in chain:
                run += step
                scores.append(confidence(run, self.aggregation, self.window))
            out.append(check_scores(scores, len(chain), who="LikelihoodVerifier"))
        return out
