"""Turning tokens into text as they arrive: whole characters only, and never the start of a stop
sequence that the next tokens might complete."""
from __future__ import annotations

import codecs


class TextStream:
    """Token ids in, final text out.

    Two things hold text back: a UTF-8 character whose bytes are split across tokens (the
    incremental decoder keeps the first bytes until the rest arrive), and text that might be the
    start of a stop sequence (released as soon as the next tokens show it is not).

    A control token's text (``<|thinking|>``) is a marker, not words the model wrote: a stop
    sequence never matches inside it or across it, so "ing|>" cannot fire on a marker.
    """

    def __init__(self, tokenizer, stop_sequences: tuple[str, ...]):
        self._token_bytes = tokenizer.token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = stop_sequences
        self._control = frozenset(getattr(tokenizer, "special_tokens", {}).values())
        self.text = ""
        self.matched: str | None = None  # the stop sequence found, if any
        self._released = 0
        self._barrier = 0  # stop sequences are looked for only after the last control token

    def add(self, token: int) -> str:
        """Append a token; return the text that is now final. A stop sequence sets ``matched``
        and cuts ``text`` just before it."""
        searched_up_to = len(self.text)
        self.text += self._decoder.decode(self._token_bytes(token))
        if token in self._control:
            self._barrier = len(self.text)
            return self._release(len(self.text))
        if self._stops:
            found = self._find_stop(searched_up_to)
            if found is not None:
                start, self.matched = found
                self.text = self.text[:start]
                return self._release(len(self.text))
        return self._release(len(self.text) - self._could_be_a_stop())

    def finish(self) -> str:
        """The rest of the text, once no more tokens will come (an unfinished character becomes U+FFFD)."""
        if self.matched is None:
            self.text += self._decoder.decode(b"", final=True)
        return self._release(len(self.text))

    def _find_stop(self, searched_up_to: int) -> tuple[int, str] | None:
        """The earliest stop sequence in the text, looking only where the new text could complete one."""
        best = None
        for stop in self._stops:
            start = self.text.find(stop, max(self._barrier, searched_up_to - len(stop) + 1))
            if start >= 0 and (best is None or start < best[0]):
                best = (start, stop)
        return best

    def _could_be_a_stop(self) -> int:
        """Length of the longest end of the text that is the beginning of some stop sequence."""
        longest = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(self.text) - self._barrier), longest, -1):
                if self.text.endswith(stop[:k]):
                    longest = k
                    break
        return longest

    def _release(self, end: int) -> str:
        end = max(end, self._released)
        piece, self._released = self.text[self._released:end], end
        return piece
