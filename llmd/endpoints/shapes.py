"""A stream's token events read by their shape: the bytes every plain token event of one
OpenAI stream shares, around the one text value that changes (issue 37, the per-token path).

vLLM writes each token of a stream as one compact event that differs from the last only in
its text: `data: {"id":...,"choices":[{"index":0,"text":"` TEXT `","logprobs":null,
"finish_reason":null,...}]}` and a blank line (the id and `created` are fixed per request).
Once one plain token event is known (`TokenShape.of`), the events a chunk starts with that each
match the head and tail around a string's content (no unescaped quote, no line break) are read
by a few compares and byte finds an event, with no scan of every byte for keys; what follows
them (a finish, a usage, another kind of event) is read as before. Such an event is, byte
for byte, the known one with another string in one place, so it reads as the known one does
(one token, no finish reason, no usage), and as text when its string is not empty: a key a
string's escaped quotes could spell is followed by the tail's `",` or `"}`, never by the `:`
that `OpenAIAnswer.event`'s patterns read a value after (pinned against it in
tests/endpoints/test_shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# The text values `dialects._SOME_TEXT` knows, in vLLM's compact layout: where a shape's head
# may end (the value's opening quote).
_TEXT_KEYS = (b'"text":"', b'"content":"', b'"reasoning_content":"')
_DONE = b"data: [DONE]\n\n"
_BACKSLASH = 0x5C


@dataclass(frozen=True, slots=True)
class TokenShape:
    """One stream's plain token event, less its text: `head` (from `data: ` to the text
    value's opening quote) and `tail` (from its closing quote to the blank line)."""

    head: bytes
    tail: bytes

    @classmethod
    def of(cls, event: bytes) -> TokenShape | None:
        """The shape of `event`, one whole plain token event (`data: {...}` and a blank line,
        no CR or other LF, no role delta, usage, error or finish reason other than `null`:
        as `OpenAIAnswer` read it), around its first text value; None when it has none, or
        what follows the value is not `,` or `}`."""
        for key in _TEXT_KEYS:
            at = event.find(key)
            if at >= 0:
                break
        else:
            return None
        start = at + len(key)
        end = _closing_quote(event, start)
        if end < 0 or event[end + 1 : end + 2] not in (b",", b"}"):
            return None
        return cls(event[:start], event[end:])

    def read(self, chunk: bytes) -> tuple[int, bool, int, bool]:
        """The whole events of this shape that `chunk` starts with, each with its own text (a
        string's content: no unescaped quote, LF or CR), and a `data: [DONE]` event that ends
        `chunk` right after them: (events of this shape, whether any had text, the bytes
        they take from the start, whether [DONE] was among them). (0, False, 0, False) when
        `chunk` starts with anything else."""
        head, tail = self.head, self.tail
        text_at, after_text, size = len(head), len(tail), len(chunk)
        at = events = 0
        text = False
        while at < size and chunk.startswith(head, at):
            start = at + text_at
            end = _closing_quote(chunk, start)
            if end < 0 or not chunk.startswith(tail, end):
                break
            if end > start:
                if chunk.find(b"\n", start, end) >= 0 or chunk.find(b"\r", start, end) >= 0:
                    break
                text = True
            events += 1
            at = end + after_text
        if at + len(_DONE) == size and chunk.startswith(_DONE, at):
            return events, text, size, True
        return events, text, at, False


def _closing_quote(data: bytes, start: int) -> int:
    """Where the JSON string whose content starts at `start` ends: its first quote not
    escaped (after an even run of backslashes); -1 when `data` has none."""
    end = data.find(b'"', start)
    while end > start and data[end - 1] == _BACKSLASH:
        before = end - 1
        while before > start and data[before - 1] == _BACKSLASH:
            before -= 1
        if (end - before) % 2 == 0:
            return end  # the backslashes escape each other
        end = data.find(b'"', end + 1)
    return end
