"""Draft-tree verification rows (``ExtendRequest.leaf_gaps``): a row of a chain plus leaves.

A leaf stored after the chain but standing at its parent's position + 1 must see exactly its
ancestors and itself. Reference: each root-to-node path run as a plain causal row on a fresh
cache (the path every other engine test checks against transformers). Checked on every path a
verification row takes: the native step for one row and for several (with a plain row beside
it), native attention under PyTorch products (a step too large for the native step), the
PyTorch path, and an int8 KV cache; the chain's K/V written by the tree step must be those of
the plain chain (the engine keeps them for the accepted drafts).

Tolerance: RANDOM_MODEL_TOL (tests/tolerances.py), the float32 rounding of these models' logits:
a leaf's own key is folded into its online-softmax state after its ancestors' blocks rather
than inside the last block, so its sums round in another order; nothing else differs. An int8
cache's block scale depends on every entry written to the block, so a tree's block (holding the
leaves too) quantizes the chain differently from a plain path's: there the reference is the same
tree step through the PyTorch path on an int8 cache (the same int8 values and scales bit for
bit, as the native step quantizes with write_quantized's arithmetic), and the bound the float32
summation order on one quantized state (1e-4, as the int8 step tests derive it).
"""

from __future__ import annotations

import pytest
import torch

from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.loader import load_model
from tests.tolerances import RANDOM_MODEL_TOL

BLOCK, NUM_BLOCKS = 4, 128
SHORT = [3, 17, 42, 9, 5, 28, 61, 7, 11, 2]  # 10 tokens: the row's cache spans blocks
# 150 tokens: the row's own positions span three of the native step's chunks (64 positions,
# decode_step.c's own_chunk), which two threads share as units of their own (split-K)
LONG = [(7 * i + 3) % 90 + 2 for i in range(150)]  # the test models have 96 tokens
SPAN = 48  # blocks a row's table may take (the long prompt's 150 + 8 tokens: 40)
# The tree after the prompt: the root (the prompt's last token, re-fed as a decoding row is),
# a chain of three drafts, and leaves: a sibling of chain token 2 (child of chain token 1), two
# children of the root (siblings of chain token 1), a child of chain token 3 (past the chain).
CHAIN = [44, 45, 46]
LEAVES = [(1, 50), (0, 51), (0, 52), (3, 53)]  # (parent node: 0 root, d chain token d; token)


def _tree_row(prompt: list[int]) -> tuple[list[int], list[int], list[list[int]]]:
    """New tokens, their gaps, and each node's path from the root (its tokens)."""
    tokens = [prompt[-1], *CHAIN, *(t for _, t in LEAVES)]
    k = len(CHAIN)
    gaps = [0] * (1 + k) + [k + 1 + j - (parent + 1) for j, (parent, _) in enumerate(LEAVES)]
    paths = [[prompt[-1], *CHAIN[:i]] for i in range(k + 1)]
    paths += [[prompt[-1], *CHAIN[:parent], tok] for parent, tok in LEAVES]
    return tokens, gaps, paths


@pytest.fixture(scope="module", params=["llama", "qwen3hd12"])
def model(request, random_model_dir):
    return load_model(random_model_dir(request.param))


def _runner(model, native: bool, dtype: torch.dtype = torch.float32) -> ModelRunner:
    cfg = model.cfg
    kv = KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim, dtype, "cpu")
    return ModelRunner(model, kv, native=native)


def _blocks(start: int, n: int) -> list[int]:
    return list(range(start, start + -(-n // BLOCK)))


def _prefill(runner: ModelRunner, table: list[int], prompt: list[int]) -> None:
    runner.extend([ExtendRequest(table, 0, prompt[:-1])])


def _reference(model, native: bool, dtype: torch.dtype, prompt: list[int]
               ) -> tuple[list[torch.Tensor], ModelRunner, list[int]]:
    """Each tree node's last-position logits from its path run as a plain row, and the runner
    and table of the plain chain's row (its cache holds the chain's K/V)."""
    _, _, paths = _tree_row(prompt)
    out = []
    chain_runner, chain_table = None, None
    for i, path in enumerate(paths):
        runner = _runner(model, native, dtype)
        table = _blocks(1, len(prompt) + 8)
        _prefill(runner, table, prompt)
        lg = runner.extend([ExtendRequest(table, len(prompt) - 1, path, all_logits=True)])[0]
        out.append(lg[-1])
        if i == len(CHAIN):
            chain_runner, chain_table = runner, table
    assert chain_runner is not None and chain_table is not None
    return out, chain_runner, chain_table


def _positions(n_new: int, prompt: list[int]) -> list[int]:
    return list(range(len(prompt) - 1, len(prompt) - 1 + n_new))


def _slots(table: list[int], positions: list[int]) -> list[int]:
    return [table[p // BLOCK] * BLOCK + p % BLOCK for p in positions]


@pytest.mark.parametrize("prompt", [SHORT, LONG], ids=["10 positions", "150 positions"])
@pytest.mark.parametrize("path", ["native_step", "native_rows", "native_attention", "torch",
                                  "int8_cache"])
def test_tree_row_equals_its_paths(model, path, prompt):
    if path != "torch" and model.native_step() is None:
        pytest.skip("no native kernels on this machine (a C compiler is needed)")
    native = path != "torch"
    dtype = torch.int8 if path == "int8_cache" else torch.float32
    tokens, gaps, _ = _tree_row(prompt)
    if dtype == torch.int8:  # the same tree through PyTorch on an int8 cache (docstring)
        chain_runner, chain_table, last = _tree_step(model, False, dtype, tokens, gaps, prompt)
        ref = list(last)
        tol = 1e-4
    else:
        ref, chain_runner, chain_table = _reference(model, native, dtype, prompt)
        tol = RANDOM_MODEL_TOL
    runner = _runner(model, native, dtype)
    table = _blocks(1, len(prompt) + 8)
    _prefill(runner, table, prompt)
    reqs = [ExtendRequest(table, len(prompt) - 1, tokens, all_logits=True, leaf_gaps=gaps)]
    if path == "native_rows":  # a plain decoding row beside it, in the same native step
        other = _blocks(1 + SPAN, len(prompt) + 1)
        _prefill(runner, other, prompt)
        reqs.append(ExtendRequest(other, len(prompt) - 1, [prompt[-1]]))
    if path == "native_attention":  # a long prefill row: the step is too large for the native
        long = list(range(2, 2 + runner.native.max_tokens + 4))  # step; rows attend natively
        reqs.append(ExtendRequest(_blocks(1 + 2 * SPAN, len(long)), 0, long))
    steps = runner.native_steps, runner.native_attention_steps
    got = runner.extend(reqs)[0]
    if path in ("native_step", "native_rows", "int8_cache"):
        assert runner.native_steps == steps[0] + 1
    if path == "native_attention":
        assert runner.native_attention_steps == steps[1] + 1
    assert got.shape[0] == len(tokens)
    for i, row in enumerate(ref):
        assert (got[i] - row).abs().max() < tol, f"node {i}"
    # the chain's K/V (positions of the root and the chain) are the plain chain's
    pos = _positions(1 + len(CHAIN), prompt)
    for a, b in ((runner.kv.k, chain_runner.kv.k), (runner.kv.v, chain_runner.kv.v)):
        flat_a = a.view(a.shape[0], -1, *a.shape[3:])[:, _slots(table, pos)].float()
        flat_b = b.view(b.shape[0], -1, *b.shape[3:])[:, _slots(chain_table, pos)].float()
        assert (flat_a - flat_b).abs().max() <= (0 if dtype == torch.int8 else 1e-5)


def _tree_step(model, native: bool, dtype: torch.dtype, tokens: list[int], gaps: list[int],
               prompt: list[int]) -> tuple[ModelRunner, list[int], torch.Tensor]:
    """A runner that ran the prompt and then the tree row, its table and the row's logits."""
    runner = _runner(model, native, dtype)
    table = _blocks(1, len(prompt) + 8)
    _prefill(runner, table, prompt)
    logits = runner.extend([ExtendRequest(table, len(prompt) - 1, tokens, all_logits=True,
                                          leaf_gaps=gaps)])[0]
    return runner, table, logits


def test_leaf_gaps_are_checked(model):
    runner = _runner(model, native=False)
    table = _blocks(1, len(SHORT) + 8)
    with pytest.raises(ValueError, match="leaf_gaps"):
        runner.extend([ExtendRequest(table, 0, [1, 2, 3], leaf_gaps=[0, 0])])
    with pytest.raises(ValueError, match="leaf_gaps"):
        runner.extend([ExtendRequest(table, 0, [1, 2, 3], leaf_gaps=[0, 2, 0])])
