"""Peers of the engine benchmark: ``transformers`` and metagen in process, the CPU engines
people use today (OpenVINO GenAI, onnxruntime-genai, llama.cpp, CTranslate2) each in its own
environment behind a pipe (:mod:`benchmarks.peers.remote`)."""

from benchmarks.peers.base import Peer, Unsupported, weight_bits
from benchmarks.peers.inprocess import (
    MetagenInt4AllPeer,
    MetagenInt4Peer,
    MetagenInt8Peer,
    MetagenPeer,
    MetagenW8A8Peer,
    TransformersPeer,
)
from benchmarks.peers.remote import (
    CTranslate2Peer,
    LlamaCppPeer,
    LlamaCppQ4Peer,
    LlamaCppQ8Peer,
    OnnxRuntimeGenAIInt4Peer,
    OnnxRuntimeGenAIInt8Peer,
    OnnxRuntimeGenAIPeer,
    OpenVINOGenAIInt8Peer,
    OpenVINOGenAIPeer,
    PeerError,
    RemotePeer,
)

PEERS: list[type[Peer]] = [TransformersPeer, MetagenPeer, MetagenInt8Peer, MetagenW8A8Peer,
                           MetagenInt4Peer, MetagenInt4AllPeer,
                           OpenVINOGenAIPeer,
                           OpenVINOGenAIInt8Peer, OnnxRuntimeGenAIPeer,
                           OnnxRuntimeGenAIInt8Peer, OnnxRuntimeGenAIInt4Peer, LlamaCppPeer,
                           LlamaCppQ8Peer, LlamaCppQ4Peer, CTranslate2Peer]

__all__ = ["PEERS", "CTranslate2Peer", "LlamaCppPeer", "LlamaCppQ4Peer", "LlamaCppQ8Peer",
           "MetagenInt4AllPeer", "MetagenInt4Peer", "MetagenInt8Peer", "MetagenPeer",
           "MetagenW8A8Peer", "OnnxRuntimeGenAIInt4Peer", "OnnxRuntimeGenAIInt8Peer",
           "OnnxRuntimeGenAIPeer", "OpenVINOGenAIInt8Peer", "OpenVINOGenAIPeer", "Peer",
           "PeerError", "RemotePeer", "TransformersPeer", "Unsupported", "weight_bits"]
