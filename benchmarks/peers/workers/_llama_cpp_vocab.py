"""Sentencepiece vocabularies for the GGUF converter (stdlib only): a synthetic one for the
benchmark's tokenizer-less models, and a model's own Llama BPE ``tokenizer.json`` restated.

``convert_hf_to_gguf.py`` reads a Llama's vocabulary from ``tokenizer.model`` (a serialized
sentencepiece ``ModelProto``). The benchmark's random-weight models have none and the workloads
speak token ids only, so any vocabulary of the right size will do: ``<unk> <s> </s>`` (ids 0-2,
as in the models' config), the 256 byte pieces ``<0x00>``..``<0xFF>`` (byte fallback, so that
llama.cpp finds its newline token) and distinct filler pieces ``▁w<i>`` up to ``vocab_size``.

The protobuf is written by hand: the converter pins ``protobuf<5`` while sentencepiece's
generated ``sentencepiece_model_pb2`` needs protobuf 5, so that module cannot be imported there.
Field numbers are those of sentencepiece's ``sentencepiece_model.proto``.
"""

from __future__ import annotations

import struct

# SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
UNIGRAM = 1  # TrainerSpec.ModelType


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int32/enum negatives are 10-byte varints
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def _bytes(field: int, value: bytes) -> bytes:
    return _key(field, 2) + _varint(len(value)) + value


def _float(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def pieces(vocab_size: int) -> list[tuple[str, float, int]]:
    """``(piece, score, type)`` for ids ``0..vocab_size-1``; byte pieces only when they fit
    with room to spare (``vocab_size >= 300``)."""
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be >= 4, got {vocab_size}")
    out = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
    if vocab_size >= 300:
        out += [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
    i = 0
    while len(out) < vocab_size:
        out.append((f"\u2581w{i}", -float(i + 1), NORMAL))
        i += 1
    return out


def tokenizer_json_pieces(tokenizer: dict) -> list[tuple[str, float, int]]:
    """``(piece, score, type)`` for every id of a Llama ``tokenizer.json`` (a BPE model with byte
    fallback, as Hugging Face converts sentencepiece Llama tokenizers), so that llama.cpp's
    sentencepiece tokenizer splits text as the model's own tokenizer does.

    llama.cpp merges the adjacent pair whose joined piece has the highest score; Hugging Face's
    BPE applies the merge of lowest rank. Scoring a merged piece ``-rank`` of the first merge
    that makes it gives both the same order. Pieces no merge makes (single characters) score
    below every merge; special tokens are control pieces (``<unk>`` unknown), ``<0xXX>`` bytes."""
    model = tokenizer["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        raise ValueError("need a BPE tokenizer.json with byte_fallback (a Llama tokenizer)")
    rank: dict[str, int] = {}
    for i, merge in enumerate(model["merges"]):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        rank.setdefault(left + right, i)
    special = {t["content"] for t in tokenizer.get("added_tokens", ()) if t.get("special")}
    floor = -float(len(model["merges"]) + 1)
    out: list[tuple[str, float, int]] = []
    for i, (piece, token_id) in enumerate(sorted(model["vocab"].items(), key=lambda kv: kv[1])):
        if token_id != i:
            raise ValueError(f"tokenizer.json vocab ids are not 0..n-1 (missing id {i})")
        if piece == model.get("unk_token"):
            out.append((piece, 0.0, UNKNOWN))
        elif piece in special:
            out.append((piece, 0.0, CONTROL))
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append((piece, 0.0, BYTE))
        else:
            out.append((piece, -float(rank[piece]) if piece in rank else floor, NORMAL))
    return out


def model_proto(vocab: int | list[tuple[str, float, int]]) -> bytes:
    """The serialized ``ModelProto`` of a unigram model with ``vocab`` pieces (a size: the
    synthetic :func:`pieces`; or a list of ``(piece, score, type)``)."""
    ps = pieces(vocab) if isinstance(vocab, int) else vocab
    vocab_size = len(ps)
    body = b"".join(
        _bytes(1, _bytes(1, p.encode()) + _float(2, s) + _int(3, t)) for p, s, t in ps)
    trainer = (_int(3, UNIGRAM) + _int(4, vocab_size) + _int(35, any(t == BYTE for *_, t in ps))
               + _int(40, 0) + _int(41, 1) + _int(42, 2) + _int(43, -1))
    normalizer = _bytes(1, b"identity") + _int(3, 1) + _int(4, 0) + _int(5, 1)
    return body + _bytes(2, trainer) + _bytes(3, normalizer)
