"""What a streaming caller has not seen yet of a request: text and token deltas per sample."""

from __future__ import annotations

from metagen.engine.outputs import StreamDelta
from metagen.engine.sequence import Request


class DeltaTracker:
    """Turns a request's state after each engine step into the :class:`StreamDelta` s since the
    previous call. Text is held back while it could be the start of a stop string; a sample's
    last delta has ``finished=True`` and is sent once."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self._sent: dict[int, tuple[int, int, bool]] = {}  # index -> (chars, tokens, finished)

    def deltas(self) -> list[StreamDelta]:
        """The deltas of every sample that moved since the last call (sample order)."""
        out = []
        for i, seq in enumerate(list(self.request.seqs)):
            chars, ntok, fin = self._sent.get(i, (0, 0, False))
            if fin:
                continue
            text = seq.detok.stream_text(seq.is_finished)
            toks = seq.state.output_ids[ntok:]
            if len(text) > chars or toks or seq.is_finished:
                out.append(StreamDelta(self.request.request_id, i, text[chars:], list(toks),
                                       seq.is_finished, seq.finish_reason, seq.error,
                                       seq.logprobs[ntok:], seq.top_logprobs[ntok:]))
                self._sent[i] = (max(chars, len(text)), len(seq.state.output_ids),
                                 seq.is_finished)
        return out
