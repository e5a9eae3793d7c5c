"""The detokenizer decodes text without stop strings only when it is read: the text read at any
point equals the one decoded after every token (a stop string that never occurs keeps a
detokenizer eager), also for a copy made for a forked sample, on the stories260K tokenizer."""

from __future__ import annotations

import random

from metagen.engine.detokenizer import Detokenizer

NEVER = "\x00never"  # a stop string no output contains: re-decoded after every token


def test_text_read_late_equals_text_decoded_every_token(stories_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(stories_path))
    rng = random.Random(0)
    for trial in range(20):
        prompt = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 8))]
        lazy, eager = Detokenizer(tok, prompt), Detokenizer(tok, prompt, [NEVER])
        out: list[int] = []
        fork_at = rng.randrange(1, 30)
        for step in range(30):
            out.append(rng.randrange(tok.vocab_size))
            assert lazy.update(out) is None and eager.update(out) is None
            if step == fork_at:  # the copy continues its own output from here
                lazy, eager, out = lazy.copy(), eager.copy(), list(out)
            if rng.random() < 0.3:  # read now and then, as a streaming caller does
                assert lazy.text == eager.text, trial
        assert lazy.text == eager.text and lazy.stream_text(True) == eager.stream_text(True)
