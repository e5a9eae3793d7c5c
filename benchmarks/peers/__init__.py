"""Peers of the engine benchmark: ``transformers`` and metagen in process, the CPU engines
people use today (OpenVINO GenAI, onnxruntime-genai, llama.cpp, CTranslate2) each in its own
environment behind a pipe (:mod:`benchmarks.peers.remote`)."""

from benchmarks.peers.base import Peer, Unsupported
from benchmarks.peers.inprocess import MetagenInt8Peer, MetagenPeer, TransformersPeer
from benchmarks.peers.remote import (
    CTranslate2Peer,
    LlamaCppPeer,
    OnnxRuntimeGenAIPeer,
    OpenVINOGenAIPeer,
    PeerError,
    RemotePeer,
)

PEERS: list[type[Peer]] = [TransformersPeer, MetagenPeer, MetagenInt8Peer, OpenVINOGenAIPeer,
                           OnnxRuntimeGenAIPeer, LlamaCppPeer, CTranslate2Peer]

__all__ = ["PEERS", "CTranslate2Peer", "LlamaCppPeer", "MetagenInt8Peer", "MetagenPeer", "OnnxRuntimeGenAIPeer",
           "OpenVINOGenAIPeer", "Peer", "PeerError", "RemotePeer", "TransformersPeer",
           "Unsupported"]
