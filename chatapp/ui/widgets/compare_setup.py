"""The compare screen's fields: prompt, tokens, a text file to score, its ctx, the KLD budget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.validation import Integer, Number
from textual.widgets import Input, Label

from chatapp import paths
from chatapp.models import compare
from chatapp.models.compare_runs import DEFAULT_KLD_BUDGET

MAX_TOKENS = 512
MAX_TEXT_CTX = 32768
DEFAULT_TEXT_CTX = 512


@dataclass(frozen=True)
class Setup:
    """What a run needs from the fields."""

    prompt: str
    tokens: int
    text: str | None  # a text file to score quality on (as `compare --text`), or None
    ctx: int


class CompareSetup(Vertical):
    """Two rows of fields; `read` checks them and says what is wrong in one sentence."""

    DEFAULT_CSS = """
    CompareSetup { height: auto; }
    CompareSetup > Horizontal { height: 1; margin-bottom: 1; }
    CompareSetup Label { padding: 0 1 0 0; }
    CompareSetup #cmp-prompt, CompareSetup #cmp-text { width: 1fr; }
    CompareSetup #cmp-tokens, CompareSetup #cmp-ctx, CompareSetup #cmp-budget { width: 8; }
    """

    def __init__(self, prompt: str, tokens: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prompt = prompt
        self.tokens = tokens

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label("prompt")
            yield Input(self.prompt, id="cmp-prompt", compact=True)
            yield Label(" tokens")
            yield Input(str(self.tokens), type="integer", id="cmp-tokens", compact=True,
                        validators=[Integer(1, MAX_TOKENS)])  # fmt: skip
        with Horizontal():
            yield Label("text")
            yield Input(
                placeholder="optional: a text file to score quality on (as compare --text)",
                id="cmp-text",
                compact=True,
            )
            yield Label(" ctx")
            yield Input(str(DEFAULT_TEXT_CTX), type="integer", id="cmp-ctx", compact=True,
                        validators=[Integer(8, MAX_TEXT_CTX)])  # fmt: skip
            yield Label(" KLD budget")
            yield Input(f"{DEFAULT_KLD_BUDGET:g}", type="number", id="cmp-budget",
                        compact=True, validators=[Number(minimum=0)])  # fmt: skip

    def _valid(self, field: str) -> bool:
        box = self.query_one(field, Input)
        check = box.validate(box.value)
        return check is None or check.is_valid

    def read(self) -> Setup | str:
        """The fields as a Setup, or one sentence saying which is wrong."""
        if not self._valid("#cmp-tokens"):
            return f"tokens must be a whole number from 1 to {MAX_TOKENS}"
        text = self.query_one("#cmp-text", Input).value.strip() or None
        ctx = DEFAULT_TEXT_CTX
        if text is not None:
            text = str(paths.expand_user(text))
            if not _is_file(text):
                return f"no text file at {text}"
            if not self._valid("#cmp-ctx"):
                return f"ctx must be a whole number from 8 to {MAX_TEXT_CTX}"
            ctx = int(self.query_one("#cmp-ctx", Input).value)
        prompt = self.query_one("#cmp-prompt", Input).value.strip() or compare.DEFAULT_PROMPT
        return Setup(prompt, int(self.query_one("#cmp-tokens", Input).value), text, ctx)

    def fill(self, result: compare.CompareResult) -> None:
        """A saved run's setup back in the fields (so it can be run again)."""
        self.query_one("#cmp-prompt", Input).value = result.prompt
        self.query_one("#cmp-tokens", Input).value = str(result.tokens)
        self.query_one("#cmp-text", Input).value = result.text_file
        if result.text_ctx:
            self.query_one("#cmp-ctx", Input).value = str(result.text_ctx)


def _is_file(path: str) -> bool:
    """Whether a file is there; a name the system cannot look up (longer than a file name
    may be) is none."""
    try:
        return Path(path).is_file()
    except OSError:
        return False
