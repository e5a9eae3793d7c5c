"""metagen.decoding: token-level decoding as pure, batched functions over ``(B, V)`` logits.

``decode_step(logits, seqs)`` processes (order in :mod:`metagen.decoding.processors`), samples
with per-row counter-based seeds (:mod:`metagen.decoding.rng`) and reports raw logprobs.
"""

from metagen.decoding.masks import (
    apply_bias, banned_by_bad_words, banned_by_ngram, bias_matrix, keep_only, mask_ids,
    mask_tokens, rows_to_mask, suppressed_end_tokens,
)
from metagen.decoding.penalties import (
    apply_presence_frequency, apply_repetition_penalty, token_counts,
)
from metagen.decoding.processors import (
    bad_rows, greedy_tokens, probs_for_sampling, process_logits,
)
from metagen.decoding.rng import uniform_for, uniforms_for
from metagen.decoding.sampler import (
    StepOutput, decode_step, inverse_cdf_sample, log_softmax_rows, top_logprobs_rows,
)
from metagen.decoding.state import SequenceState
from metagen.decoding.truncation import (
    apply_temperature, entropy_rows, epsilon_filter, eta_filter, min_p_filter, mirostat_filter,
    mirostat_update, top_k_filter, top_p_filter, typical_filter,
)

__all__ = [
    "SequenceState", "StepOutput", "decode_step", "process_logits", "probs_for_sampling",
    "greedy_tokens", "bad_rows", "log_softmax_rows", "inverse_cdf_sample", "top_logprobs_rows",
    "uniform_for", "uniforms_for",
    "apply_temperature", "top_k_filter", "top_p_filter", "min_p_filter", "typical_filter",
    "epsilon_filter", "eta_filter", "entropy_rows", "mirostat_filter", "mirostat_update",
    "apply_repetition_penalty", "apply_presence_frequency", "token_counts",
    "apply_bias", "bias_matrix", "keep_only", "mask_ids", "mask_tokens", "rows_to_mask",
    "banned_by_bad_words", "banned_by_ngram", "suppressed_end_tokens",
]
