"""Every option and argument of every command, given bad values of its type, one at a time: a
clean refusal (exit 2 or 1, one `error:` line) or a clean run, never a traceback, and nothing in
the data or config folder changed."""

from __future__ import annotations

import gc
import hashlib
import io
import shutil
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from chatapp.cli import app
from chatapp.models.bundled import smollm2_path

# ---- the bad values, by the type of the parameter -----------------------------------------

MISSING = "<missing path>"  # a path that does not exist (made per test, under tmp_path)
FOLDER = "<a folder>"  # a folder where a file is expected
FILE = "<a file>"  # a text file where a folder (or a model) is expected
HUGE = str(10**12)
OVERFLOW = str(2**64)  # past any C integer and SQLite's INTEGER
LONG = "x" * 5000  # longer than a file name may be: the system refuses to look it up

BAD_INT = ["-1", "0", HUGE, OVERFLOW, "x", "", "1.5"]
BAD_FLOAT = ["nan", "inf", "-inf", "-1", "0", "1e308", "x", ""]
BAD_TEXT = [
    "",
    " ",
    "\n",
    "a\nb",
    "\x1b[31mx",
    "[bold]x[/]",
    "日本語 ✓ é",
    LONG,
    MISSING,
    FOLDER,
    FILE,
]
BAD_PATH = ["", " ", "\n", "a\nb", "日本語.txt", MISSING, FOLDER, FILE]
BAD_CHOICE = ["x", "", "MD", "\n"]

# ---- how each command is run with every other parameter minimal ---------------------------

MODEL = str(smollm2_path())
BASE: dict[str, dict[str, list[str]]] = {
    "ask": {"prompt": ["hi"]},
    "tokenize": {"text": ["hi"]},
    "pull": {"specs": ["user/repo"]},
    "search": {"text": ["qwen"]},
    "inside": {"prompt": ["hi"]},
    "inspect": {"model": [MODEL]},
    "quantize": {"src": [MODEL], "types": ["--type", "Q8_0"]},
    "compare": {"files": [MODEL, MODEL], "tokens": ["--tokens", "2"]},
    "history show": {"conversation_id": ["1"]},
    "history export": {"conversation_id": ["1"]},
    "history delete": {"conversation_id": ["1"]},
    "steer make": {"name": ["walked"]},
    "steer meter": {"name": ["happy"], "text": ["hi"]},
}
# (command, walked parameter): the base parameters left out (they exclude each other)
LEFT_OUT = {("inside", "text"): {"prompt"}}


def commands(group=None, path=()):
    """(path, click command) of every command under the typer app, depth first."""
    group = group or typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def bad_values(param) -> list[str]:
    """The bad values of a parameter's type ([] for a flag: it takes none)."""
    if getattr(param, "is_flag", False):
        return []
    described = getattr(param, "type_descriptor", None)  # typer >= 0.20 (vendored click)
    kind = described.annotation if described is not None else None
    if described is not None and described.is_choice:
        return BAD_CHOICE
    if described is None:  # older typer: click's own param types
        kind = {"integer": int, "float": float, "path": Path}.get(param.type.name, str)
    kind = getattr(kind, "__args__", (kind,))[0]  # list[int] -> int
    if kind is int:
        return BAD_INT
    if kind is float:
        return BAD_FLOAT
    if isinstance(kind, type) and issubclass(kind, Path):
        return BAD_PATH
    return BAD_TEXT


@dataclass(frozen=True)
class Case:
    path: tuple[str, ...]
    param: str
    value: str
    argv_template: tuple[tuple[str, ...], tuple[str, ...]]  # (options, arguments)

    @property
    def id(self) -> str:
        return f"{' '.join(self.path)} {self.param}={self.value[:20]!r}"


def cases():
    for path, command in commands():
        base = BASE.get(" ".join(path), {})
        for param in command.params:
            for value in bad_values(param):
                yield _case(path, command, param, value, base)


def _case(path, command, walked, value, base) -> Case:
    options: list[str] = []
    arguments: list[str] = []
    left_out = LEFT_OUT.get((" ".join(path), walked.name), set())
    for param in command.params:
        positional = not getattr(param, "opts", [""])[0].startswith("-")
        if param.name == walked.name:
            shown = [value] if positional else [walked.opts[0], value]
        elif param.name in base and param.name not in left_out:
            shown = base[param.name]
        else:
            continue
        (arguments if positional else options).extend(shown)
    return Case(path, walked.name, value, (tuple(options), tuple(arguments)))


def _params():
    for case in cases():
        yield pytest.param(case, id=case.id)


# ---- running one case in this process ------------------------------------------------------


class Reached(BaseException):
    """The command took every value and went on to start a model, a tool or the TUI: what it
    would do next is real work (a load, a run) that the walk does not wait for."""


class RanTooLong(BaseException):
    pass


CASE_LIMIT_S = 60


def _reached(what: str):
    def stop(*_args, **_kwargs):
        raise Reached(what)

    return stop


def _stop_before_real_work(monkeypatch) -> None:
    import multiprocessing.process
    import subprocess

    import llama_cpp

    from chatapp.ui import launch

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _reached("a process"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _reached("a program"))
    monkeypatch.setattr(llama_cpp.Llama, "__init__", _reached("llama.cpp"))
    monkeypatch.setattr(launch, "run_chat_app", _reached("the TUI"))
    monkeypatch.setattr(launch, "run_versus_app", _reached("the TUI"))


def _fill(value: str, tmp: Path) -> str:
    places = {
        MISSING: str(tmp / "no such folder" / "no such file.gguf"),
        FOLDER: str(tmp / "a folder"),
        FILE: str(tmp / "a file.txt"),
    }
    return places.get(value, value)


def _tree_hash(root: Path) -> dict[str, str]:
    """Every file under root (data and config folders) and its content's hash. SQLite's
    shared-memory index and an empty write-ahead log, which a reader of the history leaves,
    change nothing saved."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


@pytest.fixture(scope="module")
def home_template(tmp_path_factory) -> Path:
    """A data folder with one saved conversation and a config file with a few settings."""
    from chatapp.history.store import Store

    root = tmp_path_factory.mktemp("walk-home")
    (root / "data").mkdir()
    (root / "config").mkdir()
    (root / "config" / "config.toml").write_text('n_ctx = 1024\ntheme = "nord"\n')
    store = Store(root / "data" / "history.db")
    cid = store.create_conversation("kept", system_prompt="Be brief.")
    store.add_message(cid, "user", "hello")
    store.close()
    return root


@dataclass
class Outcome:
    code: object
    out: str
    err: str
    reached: str | None
    crash: str | None


def run_case(case: Case, home: Path, monkeypatch, capsys) -> Outcome:
    from chatapp.cli import main

    options, arguments = case.argv_template
    argv = [*case.path, *(_fill(a, home) for a in options)]
    if arguments:
        argv += ["--", *(_fill(a, home) for a in arguments)]
    code: object = None
    reached = crash = None

    def too_long(*_args):
        raise RanTooLong

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(CASE_LIMIT_S)
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code
    except Reached as exc:
        reached = str(exc)
    except RanTooLong:
        crash = f"ran past {CASE_LIMIT_S} s"
    except BaseException:  # noqa: BLE001  (what the user would see as a traceback)
        crash = traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err, reached, crash)


@pytest.mark.parametrize("case", list(_params()))
def test_a_bad_value_is_refused_in_one_sentence_or_taken_cleanly(
    case: Case, home_template: Path, tmp_path: Path, monkeypatch, capsys
):
    home = tmp_path / "home"
    shutil.copytree(home_template, home)
    (home / "a folder").mkdir()
    (home / "a file.txt").write_text("some text\n")
    for name in ("DATA", "CONFIG", "CACHE"):
        monkeypatch.setenv(f"CHATAPP_{name}_DIR", str(home / name.lower()))
    monkeypatch.setenv("CHATAPP_CONFIG", str(home / "config" / "config.toml"))
    monkeypatch.chdir(tmp_path)  # a relative path given lands here, never in the checkout
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin\n"))
    _stop_before_real_work(monkeypatch)
    kept = {d: _tree_hash(home / d) for d in ("data", "config")}

    gc.collect()  # a model an earlier test left for the collector logs its teardown (llama.cpp's
    capsys.readouterr()  # "~llama_context: ...") through sys.stderr: not this case's output
    outcome = run_case(case, home, monkeypatch, capsys)

    shown = f"stdout: {outcome.out[-2000:]!r}\nstderr: {outcome.err[-2000:]!r}"
    assert outcome.crash is None, f"{outcome.crash}\n{shown}"
    assert "Traceback" not in outcome.out + outcome.err, shown
    assert {d: _tree_hash(home / d) for d in kept} == kept, "the data or config folder changed"
    if outcome.reached is not None or outcome.code == 0:
        return  # taken: it went on to real work (or finished) cleanly
    assert outcome.code in (1, 2), (outcome.code, shown)
    lines = [line for line in outcome.err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), shown


# ---- what the walk found: each once a traceback, a second line or a silent default ---------

FOUND = [
    (["ask", "hi", "-m", "a\nb"], 1, "model file not found: a\\nb"),  # (was two lines)
    (["models", "--dir", "a\nb"], 1, "cannot list models in a\\nb: it does not exist"),
    (["inspect", LONG], 1, f"cannot read {LONG}"),  # (was OSError: File name too long)
    (["pull", LONG], 2, f"{LONG!r} is not a Hugging Face model name"),
    (["ask", "hi", "--server", "[bold]x[/]"], 2, "--server '[bold]x[/]' is not a URL"),
    (["ask", "hi", "--server", "/tmp/x"], 2, "--server '/tmp/x' names no host"),
    (["fit", "--params", "nan"], 2, "Invalid value for '--params': nan is not a number of"),
    (["fit", "--memory", "1e308"], 2, "Invalid value for '--memory': 1e+308 is not a number"),
    (["history", "show", OVERFLOW], 2, "Invalid value for 'conversation_id': "),
    (["history", "list", "--limit", OVERFLOW], 2, "Invalid value for '--limit': "),
    (["inside", "--text", "no such file.txt"], 1, "cannot read the text file no such file.txt"),
    (["ask", "hi", "-m", ""], 2, "the model is empty: give a GGUF file or a name"),
    (["quantize", " ", "-t", "Q8_0"], 2, "the model is empty: give a GGUF file or a name"),
    (["chat", "--vs", ""], 2, "the model is empty: give a GGUF file or a name"),
    (["ask", "hi", "--file", ""], 2, "Invalid value for '--file': it is empty: give a file"),
    (["ask", "hi", "--grammar", " "], 2, "Invalid value for '--grammar': it is empty"),
    (["ask", "hi", "--ctx", HUGE], 2, "Invalid value for '--ctx': "),
    (["chat", "--ngl", HUGE], 2, "Invalid value for '--ngl': "),
]


@pytest.mark.parametrize(
    ("argv", "code", "start"), FOUND, ids=[" ".join(a)[:40] for a, _, _ in FOUND]
)
def test_what_the_walk_found_is_one_error_line_where_the_value_enters(
    argv, code, start, fresh_dirs, monkeypatch, capsys
):
    monkeypatch.chdir(fresh_dirs)
    _stop_before_real_work(monkeypatch)
    outcome = run_case(Case(tuple(argv[:1]), "", "", (tuple(argv[1:]), ())), fresh_dirs,
                       monkeypatch, capsys)  # fmt: skip
    assert outcome.crash is None and outcome.reached is None, (outcome.crash, outcome.reached)
    assert outcome.err.startswith(f"error: {start}"), outcome.err
    assert len(outcome.err.splitlines()) == 1 and outcome.code == code, outcome.err


def test_an_error_line_stays_one_line_whatever_it_quotes():
    from chatapp.textsafe import one_line

    text = "a\nb\r\nc\rd\x0be\x0cf\x1cg\x85h\u2028i\u2029j"
    assert one_line(text) == "a\\nb\\r\\nc\\rd\\x0be\\x0cf\\x1cg\\x85h\\u2028i\\u2029j"
    assert len(one_line(text).splitlines()) == 1 and one_line("plain é") == "plain é"
