"""Copy: the reply, its code blocks one per press, the conversation as Markdown, through the
terminal's clipboard (Textual's copy_to_clipboard, OSC 52), each with a notice."""

from __future__ import annotations

from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, wait_until

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
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        pane(app).session.conversation = [
            *pane(app).session.conversation[:-1],
            ChatMessage("assistant", REPLY),
        ]
        await pilot.press("alt+c")
        assert app.clipboard == copying.last_reply(pane(app).session.conversation)
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


def test_the_clipboard_limit_keeps_the_whole_osc52_sequence_within_100_kb():
    import base64

    fits = "x" * copying.CLIPBOARD_MAX_BYTES
    sequence = f"\x1b]52;c;{base64.b64encode(fits.encode()).decode()}\a"
    assert len(sequence) <= copying.OSC52_MAX_BYTES == 100_000
    assert copying.fits_clipboard(fits) and not copying.fits_clipboard(fits + "x")
    assert not copying.fits_clipboard("é" * (copying.CLIPBOARD_MAX_BYTES // 2 + 1))  # 2 bytes


async def test_a_reply_too_large_for_the_clipboard_is_not_copied_and_it_says_so():
    app = ChatApp(lambda: ScriptedEngine())
    said: list[tuple[str, dict]] = []
    huge = "Ω" * 60_000  # 120,000 bytes of UTF-8
    async with app.run_test(size=SIZE) as pilot:
        app.notify = lambda text, **kw: said.append((text, kw))
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        pane(app).session.conversation = [
            *pane(app).session.conversation[:-1],
            ChatMessage("assistant", huge),
        ]
        await pilot.press("alt+c")
        assert app.clipboard == ""  # nothing sent to the terminal
        text, kw = said[-1]
        assert text == (
            "not copied: the reply is 120,000 bytes, more than the 74,994 a terminal takes "
            "through OSC 52 (its clipboard sequence); `chatapp history show` prints the chat"
        )
        assert kw["title"] == "Not copied" and kw["severity"] == "warning"
        pane(app).session.conversation = [
            *pane(app).session.conversation[:-1],
            ChatMessage("assistant", huge[:30_000]),
        ]
        await pilot.press("alt+c")
        assert app.clipboard == huge[:30_000] and said[-1][0].startswith("copied the reply: ")
