"""Copy: the reply, its code blocks one per press, the conversation as Markdown, through the
terminal's clipboard (Textual's copy_to_clipboard, OSC 52), each with a notice."""

from __future__ import annotations

from helpers import SIZE, send, wait_until
from scripted_engine import ScriptedEngine

from chatapp.chat import copying
from chatapp.engine.protocol import ChatMessage
from chatapp.ui.app import ChatApp

REPLY = (
    "<think>plan</think>Here is the code:\n\n```python\nprint('a')\n```\n\nand a shell one:\n\n"
    "~~~~sh\necho ```not a fence end\n~~~~\n"
)


def test_code_blocks_are_found_whole_in_order():
    assert copying.code_blocks(REPLY) == ["print('a')", "echo ```not a fence end"]
    assert copying.code_blocks("```\nopen to the end") == ["open to the end"]
    assert copying.code_blocks("no code") == []


def test_the_reply_is_copied_without_its_reasoning_and_the_conversation_as_markdown():
    chat = [ChatMessage("user", "Show code"), ChatMessage("assistant", REPLY)]
    assert copying.last_reply(chat).startswith("Here is the code:")
    md = copying.conversation_markdown(chat, "Chat with m.gguf")
    assert md.startswith("# Chat with m.gguf\n\n## You\n\nShow code\n\n## Assistant\n\nHere is")
    assert "plan" not in md
    assert copying.describe("the reply", "a\nb") == "copied the reply: 3 characters, 2 lines"


async def test_copy_keys_put_the_text_on_the_clipboard_and_say_so():
    app = ChatApp(lambda: ScriptedEngine())
    notices: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.notify = lambda text, **kw: notices.append(text)
        await pilot.press("alt+c")
        assert notices[-1] == "There is no reply to copy yet."
        await send(pilot, app, "Hello there")
        await wait_until(pilot, lambda: app.reply is None and app.last_reply is not None)
        app.conversation = [*app.conversation[:-1], ChatMessage("assistant", REPLY)]
        await pilot.press("alt+c")
        assert app.clipboard == copying.last_reply(app.conversation)
        assert notices[-1].startswith("copied the reply: ")
        await pilot.press("alt+k")
        assert app.clipboard == "print('a')" and notices[-1].startswith("copied code block 1 of 2")
        await pilot.press("alt+k")
        assert app.clipboard == "echo ```not a fence end"
        await pilot.press("alt+k")
        assert app.clipboard == "print('a')"  # round again
        await pilot.press("alt+a")
        assert app.clipboard.startswith("## You\n\nHello there\n\n## Assistant\n\nHere is")
        assert notices[-1].startswith("copied the conversation as Markdown: ")
