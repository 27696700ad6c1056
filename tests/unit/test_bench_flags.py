"""Every combination of `chatapp bench`'s mode flags and options either reaches the benchmark
that runs (each option's value in its call) or is refused with one `error:` line, exit 2, before
anything loads: the console entry point in-process, each benchmark replaced by a recorder."""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path

import pytest
from fakes import reference_tools

from chatapp.cli import main
from chatapp.models.bundled import smollm2_path

RUNNERS = {
    "speed": ("chatapp.commands.bench.speed", "run_bench"),
    "--busy": ("chatapp.commands.bench.busy", "print_busy_bench"),
    "--alternatives": ("chatapp.commands.bench.batch", "print_batch_bench"),
    "--draft": ("chatapp.commands.bench.draft", "print_draft_bench"),
    "--estimate": ("chatapp.commands.bench.estimate", "print_estimate_bench"),
    "--terminal": ("chatapp.ui.bench.terminal_bench", "print_terminal_bench"),
    "--ui": ("chatapp.ui.bench.headless_bench", "run_ui_bench"),
}


@pytest.fixture
def walk(tmp_path, monkeypatch, capsys):
    """run(args) -> (exit code, stderr, the recorded call or None)."""
    import importlib

    calls: list[tuple[str, dict]] = []
    for mode, (module, name) in RUNNERS.items():
        mod = importlib.import_module(module)
        signature = inspect.signature(getattr(mod, name))

        def record(*args, _mode=mode, _sig=signature, **kwargs):
            calls.append((_mode, dict(_sig.bind(*args, **kwargs).arguments)))
            return 0

        monkeypatch.setattr(mod, name, record)
    # (typer builds the command tree once here, not at each of the walk's hundreds of calls)
    import functools

    import typer

    monkeypatch.setattr(typer.main, "get_command", functools.cache(typer.main.get_command))
    # (the stand-in tools are not asked for their --help at every step: test_reference_tools)
    from chatapp.cli import speed_commands
    from chatapp.commands.bench.reference_tools import check_tool

    monkeypatch.setattr(
        speed_commands, "check_tool", lambda name, path: check_tool(name, path, probe=False)
    )

    def run(args: list[str]):
        calls.clear()
        try:
            main(["bench", *args])
        except SystemExit as done:
            code = done.code
        else:
            code = 0
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert len(calls) <= 1
        return code, err, (calls[0] if calls else None)

    return run


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tools")
    model = folder / "other.gguf"
    model.symlink_to(smollm2_path())
    return {
        "bench": reference_tools.llama_bench(folder),
        "server": reference_tools.llama_server(folder),
        "model": model,
    }


MODES = {
    "speed": [],
    "--busy": ["--busy"],
    "--draft": ["--draft", "ngram"],
    "--alternatives": ["--alternatives", "2"],
    "--estimate": ["--estimate", "ESTIMATE"],
    "--terminal": ["--terminal"],
    "--ui": ["--ui"],
}


def _options(tools: dict[str, Path]) -> dict[str, tuple[list[str], object]]:
    """Each option as given, and how its value shows in the benchmark's call."""
    return {
        "--tokens": (["--tokens", "9"], lambda a: a.get("tokens") == 9),
        "--depth": (
            ["--depth", "17"],
            lambda a: a.get("depth", a.get("prompt_tokens")) == 17,
        ),
        "--reps": (["--reps", "1"], lambda a: a.get("reps") == 1),
        "--json": (["--json"], lambda a: a.get("as_json") is True),
        "--llama-bench": (
            ["--llama-bench", str(tools["bench"])],
            lambda a: a.get("llama_bench") == tools["bench"],
        ),
        "--llama-server": (
            ["--llama-server", str(tools["server"])],
            lambda a: a.get("llama_server") == tools["server"],
        ),
        "--load": (["--load", "memory"], lambda a: a.get("load") == "memory"),
        "--size": (["--size", "90x30"], lambda a: a.get("size") == (90, 30)),
        "--model": (
            ["--model", str(tools["model"])],
            lambda a: a["options"].model_path == str(tools["model"]),
        ),
        "--ctx": (["--ctx", "1000"], lambda a: a["options"].n_ctx == 1000),
        "--threads": (["--threads", "1"], lambda a: a["options"].n_threads == 1),
        "--ngl": (["--ngl", "0"], lambda a: a["options"].n_gpu_layers == 0),
        "--flash-attn": (["--no-flash-attn"], lambda a: a["options"].flash_attn is False),
        "--repack": (["--no-repack"], lambda a: a["options"].repack is False),
    }


def _args(mode: str, tools) -> list[str]:
    return [str(tools["model"]) if a == "ESTIMATE" else a for a in MODES[mode]]


def test_two_modes_at_once_are_refused(walk, tools):
    for (a, _), (b, _) in itertools.combinations([(m, 0) for m in MODES if m != "speed"], 2):
        code, err, call = walk([*_args(a, tools), *_args(b, tools)])
        assert code == 2 and call is None, (a, b, err)
        (line,) = err.strip().splitlines()
        assert line.startswith("error: ") and a in line and b in line, line


def test_every_option_of_every_mode_runs_as_given_or_is_refused(walk, tools):
    """Each mode with each option and each pair of options: the benchmark is called once with
    every value given, or nothing runs and one line names an option it does not take."""
    options = _options(tools)
    ran: dict[str, set[str]] = {m: set() for m in MODES}
    for mode in MODES:
        for k in (1, 2):
            for combo in itertools.combinations(options, k):
                args = _args(mode, tools) + [a for o in combo for a in options[o][0]]
                code, err, call = walk(args)
                if code == 0:
                    assert call is not None and call[0] == mode, (args, call)
                    for o in combo:
                        assert options[o][1](call[1]), f"{mode}: {o} was taken but not used"
                    if k == 1:
                        ran[mode].add(combo[0])
                    continue
                assert code == 2 and call is None, (args, code, err)
                (line,) = err.strip().splitlines()
                assert line.startswith("error: ")
                assert any(o in line for o in combo), (args, line)
    # what each mode is documented to take is taken
    common = {"--tokens", "--reps", "--json", "--model", "--ctx", "--threads", "--ngl"}
    assert ran["speed"] >= common | {"--depth", "--llama-bench", "--llama-server"}
    assert ran["--busy"] >= (common - {"--threads"}) | {
        "--depth", "--llama-bench", "--llama-server", "--load",
    }  # fmt: skip
    assert ran["--draft"] >= common | {"--llama-server"}
    assert ran["--terminal"] >= common | {"--size"}
    assert ran["--estimate"] >= {"--reps", "--json", "--threads", "--ngl"}


def test_busy_with_threads_says_why(walk):
    """--threads pins the count, and --busy compares the engine choosing it with the pinned
    count (two pinned engines reported 2.17x)."""
    code, err, call = walk(["--busy", "--threads", "2"])
    assert code == 2 and call is None
    assert "--threads pins the thread count" in err and "\n" not in err.strip()


def test_busy_leaves_out_a_thread_count_from_the_config(walk, fresh_dirs):
    config = fresh_dirs / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("threads = 1\n", encoding="utf-8")
    code, err, call = walk(["--busy"])
    assert code == 0 and call is not None
    assert call[1]["options"].n_threads is None
    assert "config.toml's threads = 1 pins the thread count" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--busy", "--load", "fire"], "--load takes spin, build, memory (got 'fire')"),
        (["--busy", "--load", ""], "--load takes spin, build, memory (got '')"),
        (["--terminal", "--size", ""], "--size takes COLUMNSxROWS"),
    ],
)
def test_an_empty_or_unknown_value_is_refused_not_taken_as_the_default(walk, args, says):
    code, err, call = walk(args)
    assert code == 2 and call is None
    assert says in err
