"""Thinking models: the reasoning between `<think>` and `</think>`, kept apart from the answer."""

from __future__ import annotations

from dataclasses import dataclass

OPEN = "<think>"
CLOSE = "</think>"


@dataclass(frozen=True)
class Split:
    """A reply cut into its reasoning and its answer."""

    thinking: str
    answer: str
    closed: bool  # the reasoning ended (False: the reply stopped while still thinking)


def opens_thinking(prompt: str) -> bool:
    """Whether the generation prompt itself opened the reasoning (DeepSeek-R1 distills,
    Qwen3 with thinking on): the reply then starts inside it, with no `<think>` of its own."""
    return prompt.rstrip().endswith(OPEN)


def split_reply(text: str, inside: bool = False) -> Split:
    """Cut a whole reply. Reasoning counts only at the start of the reply (after whitespace),
    so a `<think>` written in the middle of an answer stays part of it."""
    splitter = ThinkingSplitter(inside)
    splitter.feed(text)
    splitter.flush()
    return Split(splitter.thinking, splitter.answer, splitter.closed)


class ThinkingSplitter:
    """Streams a reply's text into reasoning and answer as it arrives; a marker cut across
    two token batches is held back until it is whole."""

    def __init__(self, inside: bool = False) -> None:
        self.state = "thinking" if inside else "start"  # start -> thinking -> answer
        self.thinking = ""
        self.answer = ""
        self.closed = False
        self._held = ""

    @property
    def in_thinking(self) -> bool:
        return self.state == "thinking"

    def feed(self, delta: str) -> None:
        text = self._held + delta
        self._held = ""
        while text:
            if self.state == "start":
                stripped = text.lstrip()
                if stripped.startswith(OPEN):
                    self.state = "thinking"
                    text = stripped[len(OPEN) :]
                elif OPEN.startswith(stripped):  # maybe the start of "<think>": wait
                    self._held = text
                    return
                else:
                    self.state = "answer"
            elif self.state == "thinking":
                at = text.find(CLOSE)
                if at >= 0:
                    self.thinking += text[:at]
                    self.state, self.closed = "answer", True
                    text = text[at + len(CLOSE) :]
                    continue
                keep = _partial_suffix(text, CLOSE)
                self.thinking += text[: len(text) - keep]
                self._held = text[len(text) - keep :]
                return
            else:
                if self.closed and not self.answer.strip():
                    text = (self.answer + text).lstrip()  # the line break after </think>
                    self.answer = ""
                self.answer += text
                return

    def flush(self) -> None:
        """The reply ended: what was held back belongs where it was."""
        held, self._held = self._held, ""
        if not held:
            return
        if self.state == "thinking":
            self.thinking += held
        else:
            self.answer += held
            if self.state == "start":
                self.state = "answer"


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
