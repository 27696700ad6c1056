"""docs/architecture.md's "A token's path" names what the code has, in the files it says."""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the names the section gives, and where it says they are
NAMED = {
    "chatapp.ui.conversation.pane": ["ConversationPane.send",
                                        "ConversationPane.on_reply_stream_tokens_arrived"],
    "chatapp.chat.session": ["ChatSession.add_user", "ChatSession.prepare", "ChatSession.took",
                             "ChatSession.finished"],
    "chatapp.chat.live_reply": ["LiveReply"],
    "chatapp.ui.streaming": ["ReplyStream.run", "ReplyStream.TokensArrived"],
    "chatapp.engine.local.process.local_engine": ["LocalEngine.generate"],
    "chatapp.engine.local.loop.reply_loop": ["ReplyLoop.send"],
    "chatapp.engine.candidate_rows": ["Candidates.settle"],
    "chatapp.ui.pacing": ["FramePacer"],
    "chatapp.ui.conversation.panel_feed": ["PanelFeed.frame", "PanelFeed.end"],
    "chatapp.ui.widgets.live_panel": ["LiveFeed.hand", "LivePanel"],
    "chatapp.engine.local.loop.token_step": ["TokenStep.step"],
    "chatapp.ui.widgets.stats": ["reply_stats", "StatsPanel.watch_reply"],
    "chatapp.ui.widgets.tokens": ["TokenPanel.watch_reply"],
    "chatapp.ui.widgets.probs": ["ProbPanel.watch_reply"],
}  # fmt: skip


def _section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split("## A token's path", 1)[1].split("\n## ", 1)[0]


def test_every_name_on_the_path_is_in_the_code_where_the_docs_say():
    section = _section()
    for module_name, names in NAMED.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert f"`{name.split('.')[-1]}`" in section or name in section, name
            obj = module
            for part in name.split("."):
                obj = getattr(obj, part)  # AttributeError: the code no longer has it


def test_one_store_of_the_tokens():
    """The session's draft, the UI's reply and the strip's rows are no copies of the tokens:
    the LiveReply is their one store. (Which files a token crosses: test_token_path_traced.)"""
    tokens, reply = (
        importlib.import_module("chatapp.ui.widgets.tokens"),
        importlib.import_module("chatapp.ui.conversation.reply"),
    )
    assert not hasattr(tokens, "ShownToken") and "tokens" not in reply.Reply.__dataclass_fields__
