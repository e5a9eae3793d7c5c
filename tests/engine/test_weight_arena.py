"""The weight arena: views in order, aligned, disjoint, on advised huge pages; the loader puts
every projection of a CPU model in one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from metagen.engine.models.loader import load_model
from metagen.engine.models.weight_arena import ALIGN, HUGE_PAGE, WeightArena

SHAPES = [(512, 1536), (7, 3), (512, 512), (1, 1), (1376, 512)]


def _thp_mode() -> str | None:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    found = re.search(r"\[(\w+)\]", text)
    return found.group(1) if found else None


def _mapping_of(address: int) -> list[str]:
    """The /proc/self/smaps block of the mapping holding ``address``."""
    block: list[str] = []
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head.group(1), 16) <= address < int(head.group(2), 16)
        if inside:
            block.append(line)
    return block


def test_views_are_in_order_aligned_disjoint_and_hold_what_is_written():
    arena = WeightArena(SHAPES)
    views = [arena.take(s) for s in SHAPES]
    spans = []
    for v, s in zip(views, SHAPES):
        assert v.shape == s and v.dtype == torch.float32 and v.is_contiguous()
        assert v.data_ptr() % ALIGN == 0
        spans.append((v.data_ptr(), v.data_ptr() + v.numel() * 4))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert views[0].data_ptr() % HUGE_PAGE == 0  # the first view opens the huge pages
    for i, v in enumerate(views):
        v.fill_(float(i))
    assert all(torch.all(v == i) for i, v in enumerate(views))


def test_take_checks_the_order_of_shapes():
    arena = WeightArena(SHAPES[:2])
    with pytest.raises(AssertionError):
        arena.take(SHAPES[1])
    arena.take(SHAPES[0])
    arena.take(SHAPES[1])
    with pytest.raises(AssertionError):
        arena.take(SHAPES[0])


def test_other_dtypes():
    arena = WeightArena([(3, 5), (2, 2)], torch.bfloat16)
    a, b = arena.take((3, 5)), arena.take((2, 2))
    assert a.dtype == b.dtype == torch.bfloat16 and b.data_ptr() % ALIGN == 0


@pytest.mark.skipif(_thp_mode() not in ("always", "madvise"),
                    reason="transparent huge pages are off or absent on this system")
def test_the_buffer_is_advised_for_huge_pages():
    arena = WeightArena([(1 << 20,)])  # 4 MiB
    view = arena.take((1 << 20,))
    assert arena.huge
    block = _mapping_of(view.data_ptr())
    assert "THPeligible:    1" in block or any(
        re.fullmatch(r"THPeligible:\s+1", line) for line in block)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_loader_puts_every_projection_in_one_arena(random_model_dir, kind):
    model = load_model(random_model_dir(kind))
    weights = [model.lm_head] if model.lm_head is not None else [model.embed]  # tied: the head
    for layer in model.layers:
        weights += [layer.qkv, layer.o, layer.gate_up, layer.down]
    storages = {w.untyped_storage().data_ptr() for w in weights}
    assert len(storages) == 1
    assert all(w.data_ptr() % ALIGN == 0 and w.is_contiguous() for w in weights)


def test_quantized_models_hold_no_float_arena(random_model_dir):
    """A quantized model's float embedding must not keep a buffer of float projections alive."""
    model = load_model(random_model_dir("qwen2"), quantization="int8")  # tied embedding
    assert model.embed.untyped_storage().nbytes() == model.embed.numel() * 4


@pytest.mark.parametrize("quantization", ["int8", "w8a8"])
def test_quantized_projections_share_one_arena(random_model_dir, quantization):
    model = load_model(random_model_dir("llama"), quantization=quantization)  # untied head
    weights = [model.lm_head] + [getattr(layer, n) for layer in model.layers
                                 for n in ("qkv", "o", "gate_up", "down")]
    qs = [w.q for w in weights]
    assert len({q.untyped_storage().data_ptr() for q in qs}) == 1
    assert all(q.dtype == torch.int8 and q.is_contiguous() and q.data_ptr() % ALIGN == 0
               for q in qs)
