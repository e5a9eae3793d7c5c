"""CTranslate2 peer worker (runs in ``.peers/ctranslate2``; see ``setup/ctranslate2.sh``).

Models are converted on first use by ``_ctranslate2_convert.py`` (in a subprocess: this process
never loads torch, whose OpenMP runtime would share the cores with CTranslate2's) into
``converted_dir(folder, "ct2-f32")`` and run as ``ctranslate2.Generator`` on the CPU in float32
with ``intra_threads`` = the harness's torch threads. CTranslate2 takes token *strings*; the
converted vocabulary has one synthetic piece per id, so ids map to pieces and back by position.

EOS is ignored by giving ``end_token`` an id outside the vocabulary (no sampled id can equal it),
rather than ``min_length``, which would mask EOS's logit and so change greedy ties and the
sampling distribution. ``include_prompt_in_result=False`` forwards the prompt in one pass (all
but its last token; the decoding loop starts from that one), so ``max_length`` counts new tokens.

- greedy: ``beam_size=1`` (best sampler).
- best_of_n: one request with ``num_hypotheses=n``, ``sampling_topk=0`` (the full distribution),
  temperature 1: CTranslate2 prefills the prompt once and replicates its KV state n times
  (``GreedySearch`` with ``num_hypotheses > 1``). The seed is only partly honoured:
  ``ctranslate2.set_random_seed`` sets a global that each thread reads *once*, when its
  ``thread_local`` mt19937 is first used, so only the first sampling call of a worker process is
  seeded by ``seed``; later calls continue that stream (reproducible run to run, but the same
  seed twice in one process gives different samples).
- beam: ``beam_size=width``, ``length_penalty=1``, ``patience=1``; no hypothesis can finish
  early (no EOS), so all have ``max_new`` tokens and the best is the highest sum of log-probs,
  as in transformers.
- speculative: Unsupported -- CTranslate2 has neither assisted (draft-model) decoding nor prompt
  lookup, and its Python API exposes no incremental KV state to build them on (``forward_batch``
  recomputes the whole sequence), so anything here would measure our loop, not CTranslate2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent

from _serve import Unsupported, Worker, converted_dir, serve

FORMAT = "ct2-f32"


def convert_all(hf_folders: list[str]) -> list[Path]:
    """The CTranslate2 conversions of ``hf_folders``; missing ones are made (in one subprocess)
    and cached."""
    outs = [converted_dir(f, FORMAT) for f in hf_folders]
    todo = [(f, o) for f, o in zip(hf_folders, outs) if not (o / "model.bin").is_file()]
    if todo:
        outs[0].parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(_HERE / "_ctranslate2_convert.py"),
                        *[str(x) for pair in todo for x in pair]], check=True, stdout=sys.stderr)
    return outs


class CTranslate2Worker(Worker):
    def load(self, paths: dict[str, str], threads: int, quantization: str | None = None) -> None:
        super().load(paths, threads, quantization)
        if quantization is not None:
            raise Unsupported(f"quantization {quantization!r}: this worker runs float32 only")
        import ctranslate2

        self.ct2 = ctranslate2
        self.generators, self.pieces, self.ids = {}, {}, {}
        for name, model_dir in zip(paths, convert_all(list(paths.values()))):
            pieces = json.loads((model_dir / "vocabulary.json").read_text())
            self.pieces[name] = pieces
            self.ids[name] = {p: i for i, p in enumerate(pieces)}
            self.generators[name] = ctranslate2.Generator(
                str(model_dir), device="cpu", compute_type="float32",
                inter_threads=1, intra_threads=threads)
        self.version = ctranslate2.__version__

    def _run(self, model: str, prompt: list[int], max_new: int, **opts) -> list[list[int]]:
        """All hypotheses of one request, as token ids (exactly ``max_new`` each)."""
        pieces, ids = self.pieces[model], self.ids[model]
        res = self.generators[model].generate_batch(
            [[pieces[t] for t in prompt]], max_length=max_new, end_token=[len(pieces)],
            include_prompt_in_result=False, **opts)[0]
        out = [[ids[p] for p in hyp] for hyp in res.sequences]
        if any(len(o) != max_new for o in out):
            raise RuntimeError(f"CTranslate2 returned lengths {[len(o) for o in out]}, "
                               f"not {max_new}")
        self.last = {"ctranslate2": self.version}
        return out

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        return self._run(model, prompt, max_new, beam_size=1, sampling_topk=1)[0]

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        self.ct2.set_random_seed(seed)
        return self._run(model, prompt, max_new, beam_size=1, num_hypotheses=n,
                         sampling_topk=0, sampling_topp=1.0, sampling_temperature=1.0)

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        return self._run(model, prompt, max_new, beam_size=width, patience=1.0,
                         length_penalty=1.0, num_hypotheses=1)[0]

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        raise Unsupported("CTranslate2 has no speculative decoding (draft model or prompt "
                          "lookup)")


if __name__ == "__main__":
    serve(CTranslate2Worker())
