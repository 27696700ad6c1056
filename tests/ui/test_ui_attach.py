"""Pilot tests of attaching files in the TUI: `/file PATH`, the input's border, refusals."""

from __future__ import annotations

import dataclasses
import threading

from fakes.engines import ScriptedEngine
from helpers import SIZE, bundled, pane, status, submit, wait_until

from chatapp.ui.app import ChatApp


async def read(pilot, app) -> None:
    """Wait until the files asked for are read and counted (a thread does it)."""
    await pilot.pause()
    await wait_until(
        pilot, lambda: not pane(app).attached.reading and not pane(app).attached.trimming
    )
    await pilot.pause()


async def test_file_lines_attach_show_tokens_and_go_with_the_message(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the tide is full tonight\n")
    code = tmp_path / "add.py"
    code.write_text("def add(a, b): return a - b\n")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01binary")
    big = tmp_path / "big.txt"
    big.write_text(" ".join(["word"] * 3000))
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one("#prompt")
        await submit(pilot, app, f"/file {notes}\nReview these\n/file {code}")
        await read(pilot, app)
        assert engine.requests == [] and prompt.text == "Review these"  # nothing sent yet
        title = str(prompt.border_title)
        assert "notes.txt 8 tok · add.py 10 tok" in title and title.endswith(": fits"), title
        await submit(pilot, app, f"/file {blob}")
        await read(pilot, app)
        assert "blob.bin is a binary file" in status(app) and len(pane(app).attached.files) == 2
        prompt.text = "Review these"
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        sent = engine.requests[-1].messages[-1].content
        assert sent.startswith("Review these\n\n" + f"{notes}\n```\nthe tide")
        assert f"{code}\n```python\ndef add" in sent
        assert not prompt.border_title and pane(app).attached.files == []
        assert pane(app).chat.items()[0].text == sent  # the chat shows what the model read
        await submit(pilot, app, f"/file {big}")
        await read(pilot, app)
        assert "too big" in str(prompt.border_title)
        await submit(pilot, app, "Summarize it")
        await pilot.pause()
        assert "but the context holds 2,048" in status(app)  # one sentence with the numbers
        assert prompt.text == "Summarize it" and len(engine.requests) == 1  # nothing lost
        await submit(pilot, app, "/detach")
        assert pane(app).attached.files == [] and not prompt.border_title


async def test_the_file_picker_attaches_files_one_after_another(tmp_path, monkeypatch):
    from textual.widgets import DirectoryTree

    from chatapp.ui.screens.file_picker import FilePickerScreen

    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.md").write_text("# beta\n")
    (tmp_path / "c.bin").write_bytes(b"\x00\x01")
    monkeypatch.chdir(tmp_path)
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await pilot.press("alt+f")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePickerScreen))
        tree = app.screen.query_one(DirectoryTree)
        await wait_until(pilot, lambda: len(tree.root.children) == 3)
        for name in ("a.txt", "b.md", "c.bin"):  # as Enter on each would
            node = next(n for n in tree.root.children if n.label.plain == name)
            tree.post_message(DirectoryTree.FileSelected(node, node.data.path))
            await pilot.pause()
            await read(pilot, app)
        note = str(app.screen.query_one("#picker-note").render())
        assert "c.bin is a binary file" in note  # refused in one sentence, nothing attached
        await pilot.press("escape")
        names = [f.name for f in pane(app).attached.files]  # the paths the tree gave
        assert names == [str(tmp_path / "a.txt"), str(tmp_path / "b.md")]
        prompt = app.query_one("#prompt")
        assert "a.txt" in str(prompt.border_title) and "b.md" in str(prompt.border_title)


async def test_trim_sends_only_the_start_of_files_too_big_for_the_context(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(" ".join(f"word{i}" for i in range(3000)))
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one("#prompt")
        await submit(pilot, app, f"/file {big}\nSummarise this")
        await read(pilot, app)
        assert "too big" in str(prompt.border_title)
        await submit(pilot, app, "Summarise this\n/trim")
        await pilot.pause()
        await wait_until(pilot, lambda: not pane(app).attached.trimming)
        assert prompt.text == "Summarise this" and "fits" in str(prompt.border_title)
        assert "files cut to what fits" in status(app)
        (cut,) = pane(app).attached.files
        assert "[cut here: the first " in cut.text and cut.text.startswith("word0 word1")
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        sent = engine.requests[-1].messages[-1].content
        assert sent.startswith("Summarise this") and "[cut here: the first " in sent


async def test_file_stdin_in_the_chat_is_one_sentence_and_the_app_keeps_answering():
    """`/file -` read the terminal Textual owns: the app froze. Now it says why not."""
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await submit(pilot, app, "/file -\nWhat is this?")
        await pilot.pause()
        assert "stdin is not available inside the chat" in status(app)
        assert "chatapp ask --file -" in status(app)
        prompt = app.query_one("#prompt")
        assert prompt.text == "What is this?" and pane(app).attached.files == []
        await pilot.press("enter")  # the message goes on without it
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        assert engine.requests[-1].messages[-1].content == "What is this?"


class BundledVocabEngine(ScriptedEngine):
    """The scripted engine with the bundled model's file as its path: the byte bound comes
    from that real vocabulary's longest token."""

    def start(self):
        info = super().start()
        self.info = dataclasses.replace(info, path=bundled())
        return self.info


class GatedEngine(ScriptedEngine):
    """Tokenizing a long text waits until the test opens the gate (a slow tokenizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.long_ones = 0  # long texts tokenized

    def tokenize(self, text: str, special: bool = True):
        if len(text) > 10_000:
            self.gate.wait(10)
            self.long_ones += 1
        return super().tokenize(text, special)


async def test_a_file_that_cannot_fit_is_refused_from_its_size_unread(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * 200_000)  # 1 MB
    engine = BundledVocabEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await submit(pilot, app, f"/file {big}")
        await read(pilot, app)
        line = status(app)
        assert "big.txt is 1,000,000 bytes, more than the 1,536 tokens a message may take" in line
        assert "load the model with a larger --ctx" in line and "nothing was attached" in line
        assert pane(app).attached.files == [] and not app.query_one("#prompt").border_title


async def test_the_app_keeps_answering_while_a_big_file_is_counted(tmp_path):
    """The file is read and tokenized in a thread: keys are handled meanwhile, the message
    waits for it, and it joins once counted."""
    big = tmp_path / "big.txt"
    big.write_text("word " * 20_000)
    engine = GatedEngine()
    app = ChatApp(lambda: engine)
    ticks = []
    async with app.run_test(size=SIZE) as pilot:
        app.set_interval(0.05, lambda: ticks.append(1))
        await submit(pilot, app, f"/file {big}")
        await wait_until(pilot, lambda: "reading" in status(app))
        prompt = app.query_one("#prompt")
        await pilot.press("h", "i")
        seen = len(ticks)
        await wait_until(pilot, lambda: len(ticks) > seen + 2)  # a timer fires meanwhile
        assert prompt.text == "hi" and pane(app).attached.reading == [str(big)]
        await pilot.press("enter")
        await pilot.pause()
        assert "big.txt is still being read" in status(app) and engine.requests == []
        engine.gate.set()
        await read(pilot, app)
        assert "big.txt 20,003 tok" in str(prompt.border_title)
        assert "attached " in status(app)
        engine.gate.clear()  # /detach while a file is read: it does not come back
        await submit(pilot, app, f"/file {big}")
        await submit(pilot, app, "/detach")
        engine.gate.set()
        await wait_until(pilot, lambda: engine.long_ones == 2)
        await pilot.pause()
        assert pane(app).attached.files == [] and not prompt.border_title
