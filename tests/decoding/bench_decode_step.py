"""Per-step cost of decode_step on Zipf-like logits (not a test; run by hand).

    OMP_NUM_THREADS=1 .venv/bin/python tests/decoding/bench_decode_step.py [V] [device]

Prints milliseconds per step for batch sizes 1, 16, 64 and a few parameter mixes.
"""

from __future__ import annotations

import sys
import time

import torch

from metagen.decoding import SequenceState, decode_step
from metagen.types import SamplingParams

CONFIGS = {
    "greedy": SamplingParams(temperature=0.0),
    "temperature": SamplingParams(temperature=0.8, seed=1),
    "top_p": SamplingParams(temperature=0.8, top_p=0.95, seed=1),
    "top_k+top_p+min_p": SamplingParams(temperature=0.8, top_k=50, top_p=0.95, min_p=0.05,
                                        seed=1),
    "all+penalties": SamplingParams(temperature=0.8, top_k=50, top_p=0.95, typical_p=0.9,
                                    repetition_penalty=1.1, presence_penalty=0.5,
                                    no_repeat_ngram_size=3, seed=1),
}


def main() -> None:
    vocab = int(sys.argv[1]) if len(sys.argv) > 1 else 32000
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    torch.manual_seed(0)
    for batch in (1, 16, 64):
        ranks = torch.argsort(torch.rand(batch, vocab), dim=-1).float() + 1
        logits = (-1.2 * ranks.log() + 0.3 * torch.randn(batch, vocab)).to(device)
        for name, params in CONFIGS.items():
            seqs = [SequenceState(params, list(range(200)), list(range(100, 300)),
                                  sample_index=i) for i in range(batch)]
            decode_step(logits, seqs)
            reps = 20
            start = time.perf_counter()
            for _ in range(reps):
                decode_step(logits, seqs)
            if device != "cpu":
                torch.cuda.synchronize()
            ms = (time.perf_counter() - start) / reps * 1e3
            print(f"B={batch:3d} V={vocab} {name:18s} {ms:8.2f} ms/step")


if __name__ == "__main__":
    main()
