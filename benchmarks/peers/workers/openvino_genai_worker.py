"""OpenVINO GenAI worker of the engine benchmark (runs in ``.peers/openvino-genai``).

Each Hugging Face folder is exported once with optimum-intel (what ``optimum-cli export openvino
--weight-format fp32`` does: a stateful fp32 OpenVINO IR and the tokenizer's IR; the factory
models have none, so :mod:`_openvino_genai_export` synthesises one) into :func:`converted_dir`;
with ``quantization="int8"`` that IR's weights are then compressed to int8 as ``--weight-format
int8`` does (NNCF, per-channel asymmetric), activations and the KV cache staying fp32.
No call uses the tokenizer (only the speculative pipeline's construction does): every call passes
token ids (``TokenizedInputs`` of shape (1, T)) and reads token ids back
(``EncodedResults.tokens``).

Pipelines are ``openvino_genai.LLMPipeline`` on CPU (its default continuous-batching backend,
paged attention, with the prefix cache off: see :meth:`OpenVINOGenAIWorker.scheduler`), fp32
everywhere (``INFERENCE_PRECISION_HINT`` f32 and ``KV_CACHE_PRECISION`` f32: the CPU plugin would
otherwise compress the KV cache to u8, and use bf16 on CPUs that have it),
``INFERENCE_NUM_THREADS`` = the harness's thread count. Every workload sets ``ignore_eos`` and
no ``min_new_tokens`` (which would mask EOS's logit and so change greedy tokens against
transformers, whose runs have no EOS at all).

- greedy: ``do_sample=False``.
- best_of_n: ``do_sample=True, num_return_sequences=n, temperature=1, top_p=1``, top-k off,
  ``rng_seed=seed``; the continuous-batching scheduler prefills the prompt once and forks.
- beam: ``num_beams=width, num_beam_groups=1, length_penalty=1, num_return_sequences=1``; the
  defaults ``stop_criteria=HEURISTIC`` (transformers' ``early_stopping=False``) and
  ``no_repeat_ngram_size`` off. With ``ignore_eos`` no beam finishes early, so every beam has
  ``max_new`` tokens and the best one is returned.
- speculative: a pipeline built with ``draft_model(<draft IR>)`` and
  ``num_assistant_tokens=k`` ("draft"), or with ``prompt_lookup=True``,
  ``num_assistant_tokens=k, max_ngram_size=3`` ("ngram", metagen's n-gram size).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _serve import Unsupported, Worker, converted_dir, serve

_HERE = Path(__file__).resolve().parent

FORMAT = "openvino-fp32"
INT8_FORMAT = "openvino-int8"


def export(hf_folders: dict[str, str], quantization: str | None = None) -> dict[str, Path]:
    """The OpenVINO IR folder of each Hugging Face folder: fp32 (``quantization`` None), or
    "int8", compressed from the fp32 IR as ``--weight-format int8`` does. The missing ones are
    made in one subprocess (``_openvino_genai_export.py``)."""
    fp32 = _convert({n: converted_dir(src, FORMAT) for n, src in hf_folders.items()},
                    lambda name: hf_folders[name], [])
    if quantization is None:
        return fp32
    if quantization != "int8":
        raise Unsupported(f"quantization {quantization!r}: use int8")
    return _convert({n: converted_dir(src, INT8_FORMAT) for n, src in hf_folders.items()},
                    lambda name: str(fp32[name]), ["--int8"])


def _convert(out: dict[str, Path], source: Any, flags: list[str]) -> dict[str, Path]:
    """Make each missing ``out[name]`` from ``source(name)`` with ``_openvino_genai_export.py
    *flags SRC DST ...`` into temporary folders that are renamed into place when complete, so a
    killed export leaves no half IR."""
    todo = [name for name in out if not (out[name] / "openvino_model.xml").is_file()]
    if not todo:
        return out
    tmps: dict[str, Path] = {}
    try:
        for name in todo:
            out[name].parent.mkdir(parents=True, exist_ok=True)
            tmps[name] = Path(tempfile.mkdtemp(prefix=out[name].name + ".",
                                               dir=out[name].parent))
        args = [a for name in todo for a in (source(name), str(tmps[name]))]
        subprocess.run([sys.executable, str(_HERE / "_openvino_genai_export.py"), *flags, *args],
                       check=True, stdout=sys.stderr)
        for name, tmp in tmps.items():
            shutil.rmtree(out[name], ignore_errors=True)
            tmp.rename(out[name])
    finally:
        for tmp in tmps.values():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


_DECOMPRESSION = {"Convert", "Subtract", "Multiply", "Reshape"}  # between a weight and its op


def ir_decode_read_bytes(xml: Path) -> int:
    """Bytes of the IR's constants, each in its stored type, but the tables a ``Gather`` reads
    one row of per token (the input embedding, with its int8 scales and zero points; RoPE
    tables): what a batch-1 decode step streams."""
    import openvino as ov

    ops = ov.Core().read_model(xml).get_ops()
    gathered: set[str] = set()
    for op in ops:
        if op.get_type_name() == "Gather":
            stack = [op.input_value(0).get_node()]
            while stack:
                node = stack.pop()
                if node.get_type_name() == "Constant":
                    gathered.add(node.get_name())
                elif node.get_type_name() in _DECOMPRESSION:
                    stack += [v.get_node() for v in node.input_values()]
    return sum(op.get_byte_size() for op in ops
               if op.get_type_name() == "Constant" and op.get_name() not in gathered)


class OpenVINOGenAIWorker(Worker):
    def load(self, paths: dict[str, str], threads: int, quantization: str | None = None) -> None:
        super().load(paths, threads, quantization)
        import openvino_genai as ov_genai

        self.ov_genai = ov_genai
        self.ir = export(paths, quantization)
        self.props: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads,
                                      "INFERENCE_PRECISION_HINT": "f32",
                                      "KV_CACHE_PRECISION": "f32"}
        self.pipes: dict[tuple[str, str], Any] = {}

    def decode_read_bytes(self, model: str) -> int:
        return ir_decode_read_bytes(self.ir[model] / "openvino_model.xml")

    def scheduler(self) -> Any:
        """LLMPipeline's CPU default is continuous batching with a prefix cache that outlives the
        call: a repeated prompt would skip its prefill, which no other peer does across calls
        (metagen's engine is built per call). Off here; the whole prompt in one prefill chunk."""
        sc = self.ov_genai.SchedulerConfig()
        sc.enable_prefix_caching = False
        sc.max_num_batched_tokens = 1 << 20
        return sc

    def pipe(self, model: str, kind: str = "plain") -> Any:
        """The pipeline of ``model``: "plain", "draft" (with the draft model) or "ngram"."""
        key = (model, kind)
        if key not in self.pipes:
            g = self.ov_genai
            extra: dict[str, Any] = {"scheduler_config": self.scheduler()}
            if kind == "draft":
                extra["draft_model"] = g.draft_model(str(self.ir["draft"]), "CPU", **self.props)
            elif kind == "ngram":
                extra["prompt_lookup"] = True
            self.pipes[key] = g.LLMPipeline(str(self.ir[model]), "CPU", **extra, **self.props)
        return self.pipes[key]

    def _generate(self, model: str, prompt: list[int], kind: str = "plain",
                  **config: Any) -> list[list[int]]:
        import numpy as np
        import openvino as ov

        g = self.ov_genai
        ids = np.asarray([prompt], dtype=np.int64)  # (1, T)
        inputs = g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        cfg = g.GenerationConfig(ignore_eos=True, **config)
        res = self.pipe(model, kind).generate(inputs, cfg)
        sd = res.extended_perf_metrics  # draft-model speculative decoding only
        if kind == "draft" and sd is not None:
            self.last = {"acceptance_rate": float(sd.get_draft_acceptance_rate()),
                         "accepted": int(sd.get_num_accepted_tokens()),
                         "proposed": int(sd.get_num_draft_tokens())}
        out = [list(map(int, t)) for t in res.tokens]
        want = config["max_new_tokens"]
        if any(len(t) != want for t in out):
            raise RuntimeError(f"openvino-genai returned lengths {[len(t) for t in out]}, "
                               f"asked for {want}")
        return out

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        return self._generate(model, prompt, do_sample=False, max_new_tokens=max_new)[0]

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        return self._generate(model, prompt, do_sample=True, num_return_sequences=n,
                              temperature=1.0, top_p=1.0, rng_seed=seed,
                              max_new_tokens=max_new)

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        return self._generate(model, prompt, num_beams=width, num_beam_groups=1,
                              num_return_sequences=1, length_penalty=1.0,
                              max_new_tokens=max_new)[0]

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        if mode == "draft":
            return self._generate(model, prompt, "draft", do_sample=False,
                                  num_assistant_tokens=k, max_new_tokens=max_new)[0]
        if mode == "ngram":
            return self._generate(model, prompt, "ngram", do_sample=False,
                                  num_assistant_tokens=k, max_ngram_size=3,
                                  max_new_tokens=max_new)[0]
        raise Unsupported(f"speculative mode {mode!r}")


if __name__ == "__main__":
    serve(OpenVINOGenAIWorker())
