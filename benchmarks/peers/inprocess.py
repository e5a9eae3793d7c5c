"""The peers that run inside the benchmark's own process: ``transformers`` and metagen.

Both run on ``METAGEN_BENCH_DEVICE`` (default ``cpu``; ``cuda`` on a GPU host, where the
out-of-process peers are CPU engines and are left out with ``METAGEN_BENCH_PEERS``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import torch

from benchmarks.peers.base import Peer, Unsupported


def bench_device() -> str:
    """The device the in-process peers run on."""
    return os.environ.get("METAGEN_BENCH_DEVICE", "cpu")


class TransformersPeer(Peer):
    """Plain ``transformers`` ``generate`` (eager attention, fp32, DynamicCache)."""

    name = "transformers"

    def available(self) -> bool:
        return True

    def load(self, paths: dict[str, Path]) -> None:
        super().load(paths)
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging

        logging.disable_progress_bar()
        logging.set_verbosity_error()
        self.models = {k: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval()
                       .to(bench_device()) for k, p in paths.items()}

    def _gen(self, model: str, prompt: list[int], **kw: Any) -> torch.Tensor:
        x = torch.tensor([prompt], device=bench_device())
        with torch.inference_mode():
            out = self.models[model].generate(x, attention_mask=torch.ones_like(x),
                                              pad_token_id=0, eos_token_id=None, **kw)
        return out[:, len(prompt):]

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        return self._gen(model, prompt, do_sample=False, max_new_tokens=max_new,
                         min_new_tokens=max_new)[0].tolist()

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        torch.manual_seed(seed)
        out = self._gen(model, prompt, do_sample=True, top_k=0, temperature=1.0,
                        num_return_sequences=n, max_new_tokens=max_new, min_new_tokens=max_new)
        return out.tolist()

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        return self._gen(model, prompt, do_sample=False, num_beams=width, max_new_tokens=max_new,
                         early_stopping=False)[0].tolist()

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        if mode not in ("draft", "ngram"):
            raise Unsupported
        kw: dict[str, Any] = ({"assistant_model": self.models["draft"]} if mode == "draft"
                              else {"prompt_lookup_num_tokens": k})
        return self._gen(model, prompt, do_sample=False, max_new_tokens=max_new,
                         min_new_tokens=max_new, **kw)[0].tolist()


class MetagenPeer(Peer):
    """metagen's engine: LLMEngine for everything (beam search as requests with
    ``BeamSearchParams``, speculative decoding as an engine built with a speculator)."""

    name = "metagen"

    def available(self) -> bool:
        return True

    def load(self, paths: dict[str, Path]) -> None:
        super().load(paths)
        from metagen.engine.models.loader import load_model

        self.models = {k: load_model(p, device=bench_device(),
                                     quantization=self.quantization)  # type: ignore[arg-type]
                       for k, p in paths.items()}

    def decode_read_bytes(self, model: str) -> int | None:
        """The quantized model's own bytes (None in float32: the checkpoint's)."""
        from benchmarks.factory import held_decode_read_bytes

        return held_decode_read_bytes(self.models[model]) if self.quantization else None

    @staticmethod
    def blocks_for(num_tokens: int) -> int:
        """KV blocks (of 16) for ``num_tokens`` tokens, plus slack: the cache is allocated (and
        zeroed) per call, so it is sized to the workload rather than to a fixed budget."""
        return num_tokens // 16 + 8

    def engine(self, model: str, prefix_cache: bool = True, num_blocks: int = 64,
               speculator=None):
        from metagen.engine.config import EngineConfig
        from metagen.engine.build import build_engine
        from metagen.engine.models.quantize import quantization_of

        cfg = EngineConfig(block_size=16, num_blocks=num_blocks, prefix_cache=prefix_cache,
                           max_num_batched_tokens=4096, device=bench_device(),
                           quantization=quantization_of(self.models[model]))
        eng = build_engine(self.models[model], None, cfg, speculator=speculator)
        eng.eos_token_ids = ()  # as the transformers peer (eos_token_id=None): fixed lengths
        return eng

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        from metagen.types import SamplingParams

        eng = self.engine(model, num_blocks=self.blocks_for(len(prompt) + max_new))
        out = eng.generate([prompt], SamplingParams(temperature=0, max_tokens=max_new,
                                                    ignore_eos=True))
        return list(out[0].outputs[0].token_ids)

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        from metagen.types import SamplingParams

        eng = self.engine(model, num_blocks=self.blocks_for(len(prompt) + n * (max_new + 16)))
        out = eng.generate([prompt], SamplingParams(
            n=n, temperature=1.0, max_tokens=max_new, ignore_eos=True, seed=seed))
        return [list(c.token_ids) for c in out[0].outputs]

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        """A beam-search request on the engine (the same core as every other request)."""
        from metagen.beam_params import BeamSearchParams

        eng = self.engine(model, num_blocks=self.blocks_for(len(prompt) + 2 * width * (max_new + 16)))
        out = eng.generate([prompt], BeamSearchParams(num_beams=width, max_tokens=max_new))
        return list(out[0].outputs[0].token_ids)

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str, tree: tuple[int, ...] = (), adaptive: bool = False) -> list[int]:
        """Greedy decoding on an engine built with a speculator: ``mode`` "draft" (the draft
        model on its own small engine, held as this peer holds its models), "draft-<scheme>"
        (the same draft quantized so, as ``EngineConfig.speculative_quantization`` loads it:
        "draft-int8") or "ngram" (prompt lookup); a draft's ``tree`` as
        ``EngineConfig.speculative_tree``; ``adaptive`` as ``EngineConfig.adaptive_speculation``
        (k at most ``k``, the costs from ``adaptive_k.draft_step_cost`` and
        ``verify_step_cost``, which ``last`` reports beside the run's statistics)."""
        from metagen.engine.adaptive_k import draft_step_cost, verify_step_cost
        from metagen.engine.draft_proposer import DraftModelProposer
        from metagen.engine.proposers import NgramProposer
        from metagen.engine.speculative_decoding import Speculator
        from metagen.types import SamplingParams

        blocks = self.blocks_for(len(prompt) + max_new + k + sum(tree) + 16)
        if mode.startswith("draft-") and mode not in self.models:
            from metagen.engine.config import Quantization
            from metagen.engine.models.loader import load_model

            scheme = cast(Quantization, mode.removeprefix("draft-"))  # load_model checks it
            self.models[mode] = load_model(self.paths["draft"], device=bench_device(),
                                           quantization=scheme)
        proposer = (DraftModelProposer(self.engine(mode, num_blocks=blocks), tree=tree)
                    if mode.startswith("draft") else NgramProposer(max_ngram=3))
        cost = draft_step_cost(self.models[mode], self.models[model]) \
            if adaptive and mode.startswith("draft") else 0.0
        verify = verify_step_cost(self.models[model])
        eng = self.engine(model, num_blocks=blocks, speculator=Speculator(
            proposer, k, adaptive=adaptive, draft_cost=cost, verify_cost=verify))
        out = eng.generate([prompt], SamplingParams(temperature=0, max_tokens=max_new))
        stats = eng.speculator.stats
        self.last = {"acceptance_rate": stats.acceptance_rate, "rounds": stats.rounds,
                     "proposed": stats.proposed, "draft_cost": cost, "verify_cost": verify,
                     "acceptance_by_depth": [round(a, 3) for a in stats.acceptance_by_depth],
                     # tokens a row's round emits (a round of every row tests depth 0)
                     "tokens_per_round": stats.emitted / (stats.tested[0] if stats.tested else 1),
                     "leaves_accepted": stats.leaves_accepted}
        return list(out[0].outputs[0].token_ids)


class MetagenInt8Peer(MetagenPeer):
    """metagen's engine with ``quantization="int8"`` (weight-only, per-channel scales): the
    same requests on int8 projections and LM head."""

    name = "metagen-int8"
    quantization = "int8"


class MetagenW8A8Peer(MetagenPeer):
    """metagen's engine with ``quantization="w8a8"``: int8-weight's projections, and each
    product's activations quantized to int8 too (int8 x int8 products)."""

    name = "metagen-w8a8"
    quantization = "w8a8"


class MetagenInt4Peer(MetagenPeer):
    """metagen's engine with ``quantization="int4"``: int4 projections with a scale per channel
    and block of 32 inputs, int8 activations, the LM head in w8a8."""

    name = "metagen-int4"
    quantization = "int4"


class MetagenInt4AllPeer(MetagenPeer):
    """metagen's engine with ``quantization="int4-all"``: as metagen-int4, the LM head in int4
    too (as onnxruntime-genai's int4 model stores it)."""

    name = "metagen-int4-all"
    quantization = "int4-all"
