"""The testbed's tokenizer: a small byte-level BPE (``tokenizers`` library) with single digits.

Digits are always single tokens (``Digits(individual_digits=True)`` before the byte-level split),
so arithmetic is done digit by digit; words of the story grammar are merged (512 tokens in all).
Special tokens: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3. Encoding adds ``<bos>`` in
front (a template post-processor), never ``<eos>``. A newline is always its own token, so the
tokens of ``prompt + completion`` are the prompt's tokens followed by the completion's (prompts
end in a newline), and a PRM reads each step's score at its ``\\n`` token.

The tokenizer file is built once by :func:`train_tokenizer` and committed
(``metagen/testbed/tokenizer.json``); every model folder carries a copy with
``tokenizer_class: PreTrainedTokenizerFast`` pinned, so that ``AutoTokenizer`` loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
VOCAB_SIZE = 512
TOKENIZER_FILE = Path(__file__).resolve().parent / "tokenizer.json"


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """Train the byte-level BPE on ``texts`` (problem prompts and solutions)."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos)])
    return tok


def raw_tokenizer() -> Tokenizer:
    """The committed ``tokenizers.Tokenizer``."""
    return Tokenizer.from_file(str(TOKENIZER_FILE))


def build_tokenizer():
    """The committed tokenizer as a ``PreTrainedTokenizerFast`` (left padding)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=raw_tokenizer(), bos_token=BOS,
                                   eos_token=EOS, pad_token=PAD, unk_token=UNK,
                                   padding_side="left", model_max_length=1024)


def save_tokenizer(tokenizer, folder) -> None:
    """Save and pin ``tokenizer_class`` so that AutoTokenizer does not guess another class."""
    tokenizer.save_pretrained(folder)
    cfg_path = Path(folder) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


class Codec:
    """Fast encode/decode over the committed tokenizer (training and sampling loops)."""

    def __init__(self) -> None:
        self.tok = raw_tokenizer()
        self.pad, self.bos, self.eos, self.unk = (self._id(s) for s in SPECIALS)
        self.size = self.tok.get_vocab_size()
        self.newline = self._id("Ċ")

    def _id(self, token: str) -> int:
        i = self.tok.token_to_id(token)
        if i is None:
            raise ValueError(f"{TOKENIZER_FILE}: the tokenizer has no token {token!r}")
        return i

    def encode(self, text: str, bos: bool = True) -> list[int]:
        return self.tok.encode(text, add_special_tokens=bos).ids

    def encode_batch(self, texts: list[str], bos: bool = True) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=bos)]

    def decode(self, ids) -> str:
        """Text of ids, stopping at the first EOS; special tokens are dropped."""
        ids = [int(i) for i in ids]
        if self.eos in ids:
            ids = ids[:ids.index(self.eos)]
        return self.tok.decode(ids, skip_special_tokens=True)


CharCodec = Codec  # backwards name used by early scripts
