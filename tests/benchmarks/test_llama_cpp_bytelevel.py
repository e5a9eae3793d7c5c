"""The testbed's byte-level BPE tokenizer as a GGUF vocabulary
(benchmarks/peers/workers/_llama_cpp_bytelevel.py): which llama.cpp pre-tokenizer a
``tokenizer.json`` is named, and (slow, with the llama.cpp peer environment) that llama.cpp then
splits the testbed's text into the testbed tokenizer's own ids."""

from __future__ import annotations

import copy
import importlib.util
import json
from types import ModuleType

import pytest

from benchmarks.peers.remote import WORKERS
from metagen.testbed.tokenizer import TOKENIZER_FILE


def _bytelevel() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_llama_cpp_bytelevel",
                                                  WORKERS / "_llama_cpp_bytelevel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TESTBED = json.loads(TOKENIZER_FILE.read_text())


def test_the_testbed_tokenizer_is_starcoders_split() -> None:
    """Digits one by one, then GPT-2's regex: llama.cpp's ``starcoder`` (\\p{N}, then GPT-2's)."""
    bl = _bytelevel()
    assert bl.is_byte_level(TESTBED) and bl.pre_tokenizer(TESTBED) == "starcoder"
    plain = copy.deepcopy(TESTBED)
    plain["pre_tokenizer"] = TESTBED["pre_tokenizer"]["pretokenizers"][1]
    assert bl.pre_tokenizer(plain) == "gpt-2"
    grouped = copy.deepcopy(TESTBED)
    grouped["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = False
    with pytest.raises(ValueError, match="no llama.cpp pre-tokenizer"):
        bl.pre_tokenizer(grouped)
    llama = copy.deepcopy(TESTBED)
    llama["model"]["byte_fallback"] = True
    assert not bl.is_byte_level(llama)


@pytest.mark.slow
def test_llama_cpp_splits_testbed_text_into_the_testbed_tokenizers_ids(tmp_path) -> None:
    httpx = pytest.importorskip("httpx")
    from benchmarks.peers.llama_cpp_server import SETUP, llama_cpp_python, serve
    from metagen import testbed
    from metagen.eval.demo import testbed_model

    if llama_cpp_python() is None:
        pytest.skip(f"llama.cpp peer environment not installed ({SETUP})")
    from transformers import AutoTokenizer

    folder = testbed_model("policy")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    problems = testbed.make_problems("test", 3)
    texts = [testbed.format_prompt(p) for p in problems] + [
        "Tom has 12 apples and buys 305 more.\n#### 317", "  two  spaces, 3.50 and -7\n\n"]
    with serve(folder, "policy", tmp_path / "server.log", threads=1) as server:
        for text in texts:
            resp = httpx.post(server.url.removesuffix("/v1") + "/extras/tokenize",
                              json={"input": text}, timeout=30.0)
            assert resp.json()["tokens"] == tokenizer(text).input_ids, text
