"""The text a stream must carry for its token ids: the ids as the source tokenizer decodes them.

``streaming_consistency`` compares each answered request's streamed text with the decoded text of its
streamed ids (``tokenizer.decode(ids, skip_special_tokens=False)`` with the tokenizer's own settings),
character for character. Exactly two differences remain allowed, because honest engines differ in
them and neither can carry a token the ids do not:

- **special tokens** (the tokenizer's added tokens marked special, e.g. ``<|im_end|>``) may be
  written as their string or as nothing: transformers writes them, llama.cpp and vLLM's default
  (``skip_special_tokens``) do not. Each one is written or omitted as a whole;
- **U+FFFD at the very end**: when the ids end inside a character whose UTF-8 bytes are split over
  tokens (``max_tokens`` cut it), the decode ends in U+FFFD; a streaming detokenizer holds such
  bytes back until the next token completes them, so it never sends them. Those trailing U+FFFD may
  be missing, and so may the rest of the text of the (at most four) last tokens that hold the split
  character's bytes, each of which is not valid UTF-8 alone: llama.cpp holds back such a token's whole
  piece, e.g. a space and the first bytes of an emoji
  (U+FFFD anywhere else must be there, where the decode has it).

Whitespace, Unicode normalisation and every other character are compared as they are.
"""

from __future__ import annotations

import re
from pathlib import Path

REPLACEMENT = "\ufffd"


class TokenizerUnavailable(Exception):
    """The source tokenizer could not be loaded: the text comparison cannot run (and so fails)."""


class SourceText:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.special = {int(i): t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        self.vocab = len(tokenizer)

    @classmethod
    def load(cls, model_dir: str | Path) -> SourceText:
        try:
            from transformers import AutoTokenizer

            return cls(AutoTokenizer.from_pretrained(model_dir))
        except Exception as exc:  # any reason at all: the check then fails naming it
            raise TokenizerUnavailable(
                f"the tokenizer of {model_dir} could not be loaded: {type(exc).__name__}: {exc}"[:500]
            ) from None

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def plain(self, ids: list[int]) -> str:
        """The ids' text without special tokens (what an answer is judged on, as the reference's)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def pattern(self, ids: list[int]) -> tuple[re.Pattern, int]:
        """The allowed texts of ``ids`` (special tokens optional) and how many trailing U+FFFD may be missing."""
        parts, run = [], []
        decoded_tail = ""
        for t in ids:
            if t in self.special:
                if run:
                    decoded_tail = self.decode(run)
                    parts.append(re.escape(decoded_tail))
                    run = []
                parts.append(f"(?:{re.escape(self.special[t])})?")
            else:
                run.append(t)
        if run:
            decoded_tail = self.decode(run)
            parts.append(re.escape(decoded_tail))
        trailing = len(decoded_tail) - len(decoded_tail.rstrip(REPLACEMENT))
        return re.compile("".join(parts), re.DOTALL), trailing

    def mismatch(self, ids: list[int], text: str) -> str | None:
        """None if ``text`` is what ``ids`` decode to (up to the two allowed differences), else why not."""
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            return f"token id {bad[0]} is outside the source vocabulary of {self.vocab}"
        pattern, trailing = self.pattern(ids)
        if any(pattern.fullmatch(text + REPLACEMENT * j) for j in range(trailing + 1)):
            return None
        k = 0  # the last k tokens' pieces, each not valid UTF-8 alone, held back whole by a streaming detokenizer
        while trailing and k < min(4, len(ids)) and REPLACEMENT in self.decode(ids[len(ids) - k - 1 : len(ids) - k]):
            k += 1
            shorter, rest = self.pattern(ids[:-k])
            if any(shorter.fullmatch(text + REPLACEMENT * j) for j in range(rest + 1)):
                return None

        def agreed(expected: str) -> int:
            return next((i for i, (a, b) in enumerate(zip(text, expected)) if a != b), min(len(text), len(expected)))

        # shown against the rendering (special tokens written or not) that agrees with the text the longest
        at, expected = max((agreed(e), e) for e in (self.decode(ids), self.plain(ids)))
        return (
            f"streamed text is not the token ids' text: first difference at character {at}: "
            f"streamed {text[max(0, at - 20) : at + 40]!r}, ids decode to {expected[max(0, at - 20) : at + 40]!r}"
        )
