"""EngineConfig: every knob of the built-in engine, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Literal

from metagen.device import resolve_device
from metagen.engine.kv_layout import block_bytes
from metagen.engine.kv_window import longest_sequence
from metagen.errors import InvalidParameterError

if TYPE_CHECKING:
    import torch

    from metagen.engine.models.config import ModelConfig

DType = Literal["float32", "bfloat16", "float16"]
Quantization = Literal["int8", "w8a8", "int4", "int4-all"]
QUANTIZATIONS: tuple[str, ...] = ("int8", "w8a8", "int4", "int4-all")
KVCacheDType = Literal["auto", "int8"]
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "int8")
DEFAULT_KV_CACHE_BYTES = 64 << 20  # the KV budget when neither num_blocks nor kv_cache_bytes
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _positive_int(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidParameterError(name, value, "must be a positive integer")


def check_quantization(value: object, name: str = "quantization") -> None:
    """Raise :class:`~metagen.errors.InvalidParameterError` naming ``name`` unless ``value`` is
    ``None`` (weights as loaded) or one of :data:`QUANTIZATIONS`."""
    if value is not None and (not isinstance(value, str) or value not in QUANTIZATIONS):
        raise InvalidParameterError(name, value,
                                    f"must be None or one of: {', '.join(QUANTIZATIONS)}")


MAX_TREE_WIDTH = 16  # candidates beside the draft at one depth


def _check_tree(tree: object, k: int, has_draft_model: bool) -> None:
    """``speculative_tree``: a sequence of at most ``k`` integers in [0, MAX_TREE_WIDTH],
    only with a draft model (its distribution gives the candidates)."""
    if not isinstance(tree, (tuple, list)) or len(tree) > k or any(
            not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= MAX_TREE_WIDTH
            for w in tree):
        raise InvalidParameterError("speculative_tree", tree, f"must be a sequence of at most "
                                    f"num_speculative_tokens={k} integers in "
                                    f"[0, {MAX_TREE_WIDTH}]")
    if any(tree) and not has_draft_model:
        raise InvalidParameterError("speculative_tree", tree,
                                    "needs speculative_model (its distribution gives the leaves)")


def _check_kv_window(sinks: object, window: object, block_size: int, speculative: bool) -> None:
    """Raise :class:`~metagen.errors.InvalidParameterError` naming the parameter unless
    ``window`` is None or a positive multiple of ``block_size`` (and then no ``speculative``
    decoding: a verification step's tokens would all attend to the blocks kept for its first
    one, so it would not equal plain windowed decoding), and ``sinks`` an integer >= 0 (> 0
    only with a window)."""
    if not isinstance(sinks, int) or isinstance(sinks, bool) or sinks < 0:
        raise InvalidParameterError("kv_sink_tokens", sinks, "must be an integer >= 0")
    if window is None:
        if sinks:
            raise InvalidParameterError("kv_sink_tokens", sinks,
                                        "needs kv_window_tokens (without a window every token "
                                        "is kept)")
        return
    _positive_int("kv_window_tokens", window)
    assert isinstance(window, int)
    if window % block_size:
        raise InvalidParameterError("kv_window_tokens", window,
                                    f"must be a multiple of block_size ({block_size})")
    if speculative:
        raise InvalidParameterError("kv_window_tokens", window, "cannot be combined with "
                                    "speculative decoding (speculative_model, prompt_lookup)")


def _check_deterministic(cfg: EngineConfig) -> None:
    """Raise :class:`~metagen.errors.InvalidParameterError` naming ``deterministic`` for the
    settings its batch-invariant kernels do not cover (see :class:`EngineConfig`)."""
    clash = [name for name, on in (
        ("quantization", cfg.quantization is not None), ("dtype", cfg.dtype != "float32"),
        # an int8 block's scale grows as tokens arrive, requantizing the earlier ones: its
        # values depend on how its tokens were split into steps
        ("kv_cache_dtype", cfg.kv_cache_dtype != "auto"),
        ("speculative_model", cfg.speculative_model is not None),
        ("prompt_lookup", cfg.prompt_lookup is not None)) if on]
    if clash:
        raise InvalidParameterError("deterministic", True, "runs float32 weights without "
                                    f"speculative decoding; cannot be combined with {clash[0]}")


@dataclass(slots=True, frozen=True)
class EngineConfig:
    """Engine settings.

    Memory: the KV cache holds ``num_blocks`` blocks of ``block_size`` tokens; give either
    ``num_blocks`` or ``kv_cache_bytes`` (the budget for K and V of all layers; the cache is
    allocated once and never grows). With neither, ``kv_cache_bytes`` defaults to 64 MiB, capped
    at what ``max_num_seqs`` sequences of ``max_model_len`` tokens could use.
    Scheduling: at most ``max_num_seqs`` running sequences and ``max_num_batched_tokens`` tokens per
    forward step (long prompts are prefilled in chunks of that size).
    ``max_model_len`` (default: the model's ``max_position_embeddings``) bounds prompt + output.
    ``prefix_cache`` enables the radix prefix cache; ``hydragen`` the shared-prefix attention,
    used for groups sharing at least ``hydragen_min_prefix`` tokens (below that the fused plain
    kernel is faster on CPU: measured crossover ~100-300 tokens on a 4-layer, 256-wide model).
    ``device`` "auto" picks CUDA when available; any other device must exist and be usable here
    (checked on construction, :func:`~metagen.device.resolve_device`).
    ``device`` "auto" picks CUDA when available.
    Speculative decoding (engine-wide, see :mod:`metagen.engine.speculative_decoding`):
    ``speculative_model`` (a folder: a small model with the same vocabulary, run on its own
    engine) or ``prompt_lookup`` (prompt lookup with n-grams of at most this many tokens) drafts
    up to ``num_speculative_tokens`` tokens per decoding row and step; with
    ``adaptive_speculation`` each row drafts as many of them as pays for its running acceptance
    rate (:mod:`metagen.engine.adaptive_k`), none where no draft pays (then one every few
    steps, to re-measure). ``speculative_quantization`` quantizes the draft
    model's weights as ``quantization`` does the target's (only with ``speculative_model``):
    the drafts change, never the output, which the target verifies in its own precision.
    ``speculative_tree`` (only with ``speculative_model``) makes each round's drafts a token
    tree: ``speculative_tree[d]`` more candidates beside the draft at depth ``d`` (the draft's
    next best tokens there, greedy; draws without replacement from its distribution, sampled),
    each a leaf verified in the same target step (a tree attention mask) and accepted where the
    draft's own token is not; ``()`` drafts a chain. At most ``num_speculative_tokens`` depths.
    ``quantization`` "int8" quantizes the linear projections (and an untied LM head) at load,
    weight-only, one float32 scale per output channel (:mod:`metagen.engine.models.quantize`):
    a quarter of the weight bytes to stream per decoding step; "w8a8" also quantizes each
    product's activations to int8 (per row, blocks of 32:
    :func:`~metagen.engine.models.int8.quantize_activations`) and multiplies int8 by int8: less
    exact, faster than "int8" for batch-1 decoding and slower at 16 rows on a CPU without VNNI
    (``benchmarks/README.md``), so it is a choice, not the default; "int4" stores the four
    projections as int4 with a float32 scale per output channel and block of 32 inputs
    (:mod:`metagen.engine.models.int4`; an eighth of the float32 bytes, w8a8's int8 activations,
    an untied LM head in w8a8); "int4-all" is "int4" with an untied LM head in int4 too (as
    onnxruntime-genai's int4 models and llama.cpp's ``--pure`` store it: the head is the largest
    single matrix of a small model, and int4 reads it in about half w8a8's bytes, at the
    precision of the matrix that decides every token); ``None`` keeps the weights as loaded.
    Token dropping (:mod:`metagen.engine.kv_window`, StreamingLLM): with ``kv_window_tokens``
    set (a positive multiple of ``block_size``), each sequence keeps the blocks of its first
    ``kv_sink_tokens`` tokens (rounded up to whole blocks; 0 = no sinks) and of its most recent
    ``kv_window_tokens`` tokens plus the block being written, and releases the blocks in between;
    ``None`` keeps everything. ``kv_sink_tokens`` needs a window; a window excludes speculative
    decoding. With a window the longest sequence is no longer capped by the cache's size but by
    what a sequence holds at once: sink blocks + window blocks + 1 + the blocks of one step's
    new tokens (a prefill or recompute chunk of up to ``max_num_batched_tokens``). When that
    fits in the cache, sequences run up to ``max_model_len`` (at most the model's
    ``max_position_embeddings``); else the cap stays the tokens the cache holds, so a small
    cache wants a small ``max_num_batched_tokens`` too.
    ``kv_cache_dtype`` "auto" stores K/V in the model's dtype; "int8" stores them as int8 with
    one float32 scale per layer, block and kv head (:mod:`metagen.engine.kv_quant`): the byte
    budget counts both, so it holds ~4x the tokens of a float32 cache; the native decode step
    quantizes its new K/V in C (a larger step in PyTorch) and attention dequantizes in the
    kernel.
    ``deterministic`` runs every step through the native kernels, batch-invariant
    (:mod:`metagen.engine.invariant`): a token's logits are the same bits whatever the prefix
    cache held, whatever else was batched with it and on any thread count, so a seeded sample
    is a function of its prompt, seed and index alone. It needs the native build and a float32
    CPU model without ``quantization`` and a float32 KV cache; it turns Hydragen off and excludes speculative decoding
    (the draft's own engine would need it too). Wide prefills run slower (the native products
    at most 16 rows at a time instead of MKL's GEMM).
    """

    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_bytes: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    prefix_cache: bool = True
    hydragen: bool = True
    hydragen_min_prefix: int = 192
    dtype: DType = "float32"
    device: str = "auto"
    speculative_model: str | None = None
    num_speculative_tokens: int = 4
    prompt_lookup: int | None = None
    adaptive_speculation: bool = False
    speculative_quantization: Quantization | None = None
    speculative_tree: tuple[int, ...] = ()
    quantization: Quantization | None = None
    kv_sink_tokens: int = 0
    kv_window_tokens: int | None = None
    kv_cache_dtype: KVCacheDType = "auto"
    deterministic: bool = False

    def __post_init__(self) -> None:
        _positive_int("block_size", self.block_size)
        _positive_int("num_blocks", self.num_blocks, allow_none=True)
        _positive_int("kv_cache_bytes", self.kv_cache_bytes, allow_none=True)
        if self.num_blocks is not None and self.kv_cache_bytes is not None:
            raise InvalidParameterError("kv_cache_bytes", self.kv_cache_bytes,
                                        "give either num_blocks or kv_cache_bytes, not both")
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive_int("max_model_len", self.max_model_len, allow_none=True)
        if not isinstance(self.hydragen_min_prefix, int) or isinstance(
                self.hydragen_min_prefix, bool) or self.hydragen_min_prefix < 0:
            raise InvalidParameterError("hydragen_min_prefix", self.hydragen_min_prefix,
                                        "must be an integer >= 0")
        for name in ("prefix_cache", "hydragen", "adaptive_speculation", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidParameterError(name, getattr(self, name), "must be a bool")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise InvalidParameterError("dtype", self.dtype,
                                        "must be 'float32', 'bfloat16' or 'float16'")
        if not isinstance(self.device, str) or not self.device:
            raise InvalidParameterError("device", self.device, "must be 'auto', 'cpu', 'cuda', ...")
        if self.device != "auto":
            resolve_device(self.device)  # an unknown or absent device fails here, before loading
        if self.speculative_model is not None:
            if not isinstance(self.speculative_model, (str, PathLike)) or not str(
                    self.speculative_model):
                raise InvalidParameterError("speculative_model", self.speculative_model,
                                            "must be a model folder")
            object.__setattr__(self, "speculative_model", str(self.speculative_model))
        if not isinstance(self.num_speculative_tokens, int) or isinstance(
                self.num_speculative_tokens, bool) or not 1 <= self.num_speculative_tokens <= 64:
            raise InvalidParameterError("num_speculative_tokens", self.num_speculative_tokens,
                                        "must be an integer in [1, 64]")
        _positive_int("prompt_lookup", self.prompt_lookup, allow_none=True)
        if self.prompt_lookup is not None and self.speculative_model is not None:
            raise InvalidParameterError("prompt_lookup", self.prompt_lookup,
                                        "give either speculative_model or prompt_lookup")
        check_quantization(self.quantization)
        check_quantization(self.speculative_quantization, "speculative_quantization")
        if self.speculative_quantization is not None and self.speculative_model is None:
            raise InvalidParameterError("speculative_quantization", self.speculative_quantization,
                                        "needs speculative_model (it quantizes the draft model)")
        _check_tree(self.speculative_tree, self.num_speculative_tokens,
                    self.speculative_model is not None)
        object.__setattr__(self, "speculative_tree", tuple(self.speculative_tree))
        _check_kv_window(self.kv_sink_tokens, self.kv_window_tokens, self.block_size,
                         self.speculative_model is not None or self.prompt_lookup is not None)
        if not isinstance(self.kv_cache_dtype, str) or self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InvalidParameterError("kv_cache_dtype", self.kv_cache_dtype,
                                        f"must be one of: {', '.join(KV_CACHE_DTYPES)}")
        if self.deterministic:
            _check_deterministic(self)

    def torch_dtype(self) -> torch.dtype:
        import torch

        return {"float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}[self.dtype]

    def kv_torch_dtype(self, model_dtype: torch.dtype) -> torch.dtype:
        """The KV cache's element type for a model of ``model_dtype``."""
        import torch

        return torch.int8 if self.kv_cache_dtype == "int8" else model_dtype

    def torch_device(self) -> str:
        """The device to load on (see :func:`resolve_device`)."""
        return resolve_device(self.device)

    def max_positions(self, model: ModelConfig) -> int:
        """The most positions an engine with these settings can run ``model`` for: the RoPE
        tables are built for this many. It is ``max_model_len`` (default: the model's
        ``max_position_embeddings``), at most the sliding window, and at most the tokens the KV
        cache holds (``num_blocks`` x ``block_size``; else the ``kv_cache_bytes`` budget,
        default 64 MiB, in whole blocks of the ``kv_cache_dtype`` layout). A config claiming
        10^9 positions therefore costs a table no larger than what the cache can use. With a KV
        window the cache bound is what a sequence holds at once
        (:func:`~metagen.engine.kv_window.longest_sequence`: its kept blocks plus one step of
        ``max_num_batched_tokens``), and ``max_model_len`` is also capped at the model's
        ``max_position_embeddings``."""
        mpe = model.max_position_embeddings
        wanted = min(self.max_model_len or mpe, model.sliding_window or mpe)
        if self.kv_window_tokens is not None:
            wanted = min(wanted, mpe)
        int8 = self.kv_cache_dtype == "int8"
        per_block = block_bytes(model.num_layers, self.block_size, model.num_kv_heads,
                                model.head_dim, 1 if int8 else _DTYPE_BYTES[self.dtype], int8)
        blocks = self.num_blocks or (self.kv_cache_bytes or DEFAULT_KV_CACHE_BYTES) // per_block
        return max(1, longest_sequence(wanted, blocks, self.block_size, self.kv_sink_tokens,
                                       self.kv_window_tokens, self.max_num_batched_tokens))
