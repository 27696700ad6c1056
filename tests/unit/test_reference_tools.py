"""A reference program that is missing, exits with an error or prints something that is not its
output: one sentence naming the program and the last line it printed, never a traceback."""

from __future__ import annotations

import pytest
from fakes import reference_tools
from helpers import run_cli

from chatapp.commands.bench.llama_bench_tool import llama_bench_run
from chatapp.commands.bench.reference_tools import ToolError, check_tool
from chatapp.commands.bench.server import LlamaServer
from chatapp.engine.protocol import LoadOptions

OPTIONS = LoadOptions(model_path="m.gguf", n_threads=1, n_ctx=256)


def _one_error_line(r, *words: str) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("note:")]
    assert line.startswith("error: "), line
    for word in words:
        assert word in line, line
    return line


@pytest.mark.parametrize(
    "args",
    [
        ["--llama-bench", "/bin/false"],
        ["--llama-server", "/bin/false"],
        ["--busy", "--llama-bench", "/bin/false"],
        ["--busy", "--llama-server", "/bin/false"],
        ["--draft", "ngram", "--llama-server", "/bin/false"],
    ],
)
def test_a_tool_that_fails_is_named_before_anything_loads(args):
    r = run_cli("bench", *args, timeout=60)
    assert r.returncode == 1
    tool = args[-2].lstrip("-")
    _one_error_line(r, tool, "exited with code 1", "/bin/false")


@pytest.mark.parametrize(
    ("mode", "flag"),
    [
        ([], "--llama-bench"),
        ([], "--llama-server"),
        (["--busy"], "--llama-bench"),
        (["--busy"], "--llama-server"),
        (["--draft", "ngram"], "--llama-server"),
    ],
)
def test_a_missing_tool_is_one_sentence(mode, flag, tmp_path):
    missing = tmp_path / "nowhere" / "tool"
    r = run_cli("bench", *mode, flag, str(missing), timeout=60)
    assert r.returncode == 1
    _one_error_line(r, flag.lstrip("-"), "not found at", str(missing))


def test_a_tool_that_is_not_executable_or_a_folder_is_one_sentence(tmp_path):
    plain = tmp_path / "llama-bench"
    plain.write_text("not a program")
    with pytest.raises(ToolError, match="not executable"):
        check_tool("llama-bench", plain)
    with pytest.raises(ToolError, match="is not a file"):
        check_tool("llama-bench", tmp_path)


def test_llama_bench_that_fails_or_prints_garbage_names_its_last_line(tmp_path):
    failing = reference_tools.failing(tmp_path, "llama-bench", "error: failed to load model")
    check_tool("llama-bench", failing)  # (its --help answers)
    with pytest.raises(ToolError) as err:
        llama_bench_run(failing, OPTIONS, 16, 8)
    assert str(err.value) == (
        "llama-bench exited with code 1; the last line it printed: 'error: failed to load model'"
    )
    junk = reference_tools.garbage(tmp_path, "junk", "<html>hello</html>")
    with pytest.raises(ToolError) as err:
        llama_bench_run(junk, OPTIONS, 16, 8)
    assert str(err.value) == (
        "llama-bench printed no JSON result; the last line it printed: '<html>hello</html>'"
    )
    silent = reference_tools.garbage(tmp_path, "silent", "")
    with pytest.raises(ToolError, match="printed no JSON result; the last line it printed: "):
        llama_bench_run(silent, OPTIONS, 16, 8)


def test_llama_server_that_exits_says_its_last_line(tmp_path):
    failing = reference_tools.failing(tmp_path, "llama-server", "error: failed to load model")
    with pytest.raises(ToolError) as err, LlamaServer(failing, OPTIONS, str(tmp_path / "s.log")):
        pass
    assert str(err.value).startswith(
        "llama-server exited with code 1 before it answered; the last line it printed: "
        "'error: failed to load model'"
    )
    junk = reference_tools.garbage(tmp_path, "junk", "<html>hello</html>")
    with pytest.raises(ToolError) as err, LlamaServer(junk, OPTIONS, str(tmp_path / "j.log")):
        pass
    assert "exited with code 0 before it answered" in str(err.value)
    assert "'<html>hello</html>'" in str(err.value)


def test_busy_with_a_llama_server_that_prints_garbage_is_one_line_before_the_models(tmp_path):
    """--busy starts llama-server before its engines: a wrong program is named at once."""
    junk = reference_tools.garbage(tmp_path, "llama-server", "Segmentation fault (core dumped)")
    r = run_cli("bench", "--busy", "--llama-server", str(junk), timeout=120)
    assert r.returncode == 1
    _one_error_line(r, "llama-server exited with code 0", "'Segmentation fault (core dumped)'")
