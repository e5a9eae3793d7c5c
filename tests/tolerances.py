"""The bound for tests that compare log-probabilities (or logits, scores) of the same float32 model
computed along two paths, and where it comes from.

Source: summation order. The paths (a different batch shape or chunking, a thread split, the
native kernels against PyTorch, AVX-512 against AVX2 vectors, MKL against ATen, transformers'
forward or llama.cpp's ggml against the engine's, a server against the library) add the same
float32 products in a different order. A float32 sum of K products is off by at most
gamma_K * sum |terms| (gamma_K ~ K u, u = 2^-24 = 6e-8) and, the roundings of different terms
being uncorrelated, typically by ~sqrt(K) u * sum |terms|.

Size on the models the tests use (stories260K: width 64, MLP 172, 5 layers; the testbed
policy: width 192, MLP 512, 4 layers; the random test models: width 64, 2 layers): the
final-norm output has |h| ~ 1 per coordinate and the logits |z| <= ~25, so one logit's
rounding is ~sqrt(192) * 6e-8 * 25 ~ 2e-5 at most typical, and the errors the layers below pass
up are of the same order relative to |z| after each RMSNorm rescales them. A log-probability
z - logsumexp(z) adds the log-sum-exp's own (smaller) error. Measured: at most 6e-6 (stories260K,
AVX-512 and AVX2). FLOAT_LOGPROB_TOL is five times the typical estimate. A sum of n such
values (a cumulative log-probability, a sequence score) adds n errors of random sign, ~sqrt(n)
times one: ~3e-5 for the 20-40 tokens the tests sum, at the measured 6e-6 per token.

Not covered: two paths that quantize (int8 / int4 weights, w8a8 activations, the int8 KV cache)
from different float32 inputs, where a value on a rounding boundary is stored a whole step
apart: those tests feed both paths the same quantized state, bound the difference in units of
the quantization step, or compare tokens and a statistic over positions
(tests/engine/_int8_runs.py, tests/engine/_bounds.py).
"""

from __future__ import annotations

FLOAT_LOGPROB_TOL = 1e-4
# The random test models (tests/engine/conftest.py: width 64, products of <= 96 terms, 2 layers)
# have logits |z| <= ~6 (measured 5.9): ~sqrt(96) * 6e-8 * 6 = 3.5e-6 typical, five times that
RANDOM_MODEL_TOL = 2e-5
# A reward model's probability-valued score (a sigmoid of its head's logit; a two-label softmax
# is a sigmoid of the logits' difference) moves by at most 1/4 of that logit's change (1/2 of
# one logit's for two labels). The random reward models of tests/scorers (width 32, 2 layers)
# have head logits |z| < 1: ~sqrt(64) * 6e-8 * 1 = 5e-7 per logit, far below 1e-5. Scores of
# the testbed's reward models through the server against the library are the same computation
# in another batch: within the engine's batch-composition bound, 1e-5 relative of a score <= 1.
SCORE_TOL = 1e-5
