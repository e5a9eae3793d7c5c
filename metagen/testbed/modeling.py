"""Model configurations of the testbed and loading helpers (plain transformers classes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.testbed.tokenizer import Codec as CharCodec

ModelName = Literal["policy", "draft", "orm", "prm", "policy-s", "revise", "prm-head"]
MODELS_DIR = Path(__file__).resolve().parent / "models"
PIPELINE: tuple[str, ...] = ("policy", "draft", "orm", "prm")  # what a plain `train` makes
#: trained only when named (`train --only NAME`): policy-s, revise (the policy fine-tuned to
#: revise an attempt) and prm-head (the step-value head over the ORM's and policy-s's
#: confidences).
NAMES: tuple[str, ...] = (*PIPELINE, "policy-s", "revise", "prm-head")


@dataclass(frozen=True, slots=True)
class ArchConfig:
    """Llama shape. ``hidden`` must be divisible by ``heads``; ``heads`` by ``kv_heads``."""

    hidden: int = 192
    layers: int = 4
    heads: int = 6
    kv_heads: int = 6
    intermediate: int = 512
    max_positions: int = 1024

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "max_positions"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise InvalidParameterError(name, v, "must be a positive integer")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise InvalidParameterError("heads", self.heads, "hidden % heads and heads % kv_heads must be 0")

    def params(self, vocab: int) -> int:
        """Parameters of the Llama of this shape over ``vocab`` tokens, tied embeddings: the
        embedding, per layer the attention (q, o: hidden x hidden; k, v: hidden x kv_heads x
        head_dim), the gated MLP (3 x hidden x intermediate) and two RMS norms, the final norm."""
        kv = self.kv_heads * (self.hidden // self.heads)
        layer = (2 * self.hidden * self.hidden + 2 * self.hidden * kv
                 + 3 * self.hidden * self.intermediate + 2 * self.hidden)
        return vocab * self.hidden + self.layers * layer + self.hidden

    def llama_config(self):
        from transformers import LlamaConfig

        codec = CharCodec()
        return LlamaConfig(
            vocab_size=codec.size, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads, head_dim=self.hidden // self.heads,
            max_position_embeddings=self.max_positions, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=True, bos_token_id=codec.bos, eos_token_id=codec.eos,
            pad_token_id=codec.pad, attention_bias=False, mlp_bias=False)


POLICY_ARCH = ArchConfig()
DRAFT_ARCH = ArchConfig(hidden=96, layers=2, heads=3, kv_heads=3, intermediate=256)
POLICY_S_ARCH = ArchConfig(hidden=128, layers=4, heads=4, kv_heads=4, intermediate=384)

#: The policy family, small to large: the same recipe (data, 2,400 steps, seed) at three sizes;
#: the draft is its smallest member. ``ArchConfig.params(vocab)`` gives each size.
FAMILY: dict[str, ArchConfig] = {"draft": DRAFT_ARCH, "policy-s": POLICY_S_ARCH,
                                 "policy": POLICY_ARCH}


def model_path(name: ModelName) -> Path:
    """Folder of a committed testbed model (a Hugging Face folder: config, safetensors, tokenizer)."""
    if name not in NAMES:
        raise InvalidParameterError("name", name, f"must be one of {NAMES}")
    return MODELS_DIR / name


def train_command(name: str, folder: Path) -> str:
    """The command that trains model ``name`` into ``folder`` (``--overwrite-shipped`` when
    ``folder`` is a shipped model's)."""
    root = folder.parent
    shipped = root.resolve() == MODELS_DIR.resolve()
    return (f"metagen testbed train --only {name} --out {root}"
            + (" --overwrite-shipped" if shipped else ""))


def require_model(name: str, folder: str | Path | None = None) -> Path:
    """The folder of testbed model ``name`` (``folder``, default its shipped one), checked to
    hold a model; ``ModelLoadError`` naming the model and the command that trains it
    otherwise."""
    path = Path(folder) if folder is not None else model_path(name)  # type: ignore[arg-type]
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"the testbed {name} model is missing at {path}; train it with "
                             f"`{train_command(name, path)}`")
    return path


def load_model(name: ModelName, folder: str | Path | None = None, dtype=None):
    """The model with plain transformers: CausalLM for the policy family and the ORM (a
    generative verifier: an independently seeded policy scored by its confidence, see
    :mod:`metagen.testbed.pipeline`), TokenClassification for the PRM. Raises
    ``ModelLoadError`` if the folder is missing."""
    import transformers

    path = require_model(name, folder)
    cls = (transformers.LlamaForTokenClassification if name == "prm"
           else transformers.LlamaForCausalLM)
    import torch

    model = cls.from_pretrained(path, dtype=dtype or torch.float32)
    model.eval()
    return model


def load_tokenizer(name: ModelName = "policy", folder: str | Path | None = None):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(folder) if folder is not None else model_path(name))


def save_model_folder(model, out_dir: str | Path) -> None:
    """Save a testbed model as a plain Hugging Face folder: fp32 safetensors, the testbed
    tokenizer, and no ``generation_config.json`` (decoding settings come from metagen's
    SamplingParams, never from the folder)."""
    from metagen.testbed.tokenizer import build_tokenizer, save_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out, safe_serialization=True)
    save_tokenizer(build_tokenizer(), out)
    gen_cfg = out / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()
