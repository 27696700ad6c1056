"""`chatapp ask`, `chatapp tokenize` and bad input, through the real console entry point."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading

import pytest
from fakes.servers import StubServer
from helpers import REPO, SIGINT_IGNORED, bundled, run_cli

from chatapp import machine
from chatapp.cpus import usable_cpus
from chatapp.engine.local.load import huge_pages


@pytest.mark.slow
def test_ask_streams_reply_and_stats_line():
    r = run_cli("ask", "Say hi.", "--temperature", "0", "--max-tokens", "16", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("TTFT ") and "decode" in last and "stop:" in last


@pytest.mark.slow
def test_ask_json_has_the_documented_keys():
    r = run_cli("ask", "Say hi.", "--json", "--temperature", "0", "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    for key in (
        "text",
        "stop_reason",
        "prompt_tokens",
        "completion_tokens",
        "ttft_s",
        "prefill_tps",
        "decode_tps",
        "load_s",
        "model",
        "tokens",
    ):
        assert key in data
    assert set(data["model"]) == {"path", "size_bytes", "quant", "architecture", "n_params"}
    assert data["model"]["architecture"] == "llama"
    assert data["model"]["quant"] == "Q4_1"
    assert data["completion_tokens"] == len(data["tokens"]) > 0
    tok = data["tokens"][0]
    assert {"id", "text", "logprob", "top"} <= set(tok)
    assert tok["top"] and {"id", "text", "p"} <= set(tok["top"][0])
    assert "".join(t["text"] for t in data["tokens"]) == data["text"]
    # Extra CPU buffers stay on unless they crashed here: on a CPU with AMX, llama.cpp's AMX
    # path takes Q4_1 and crashes on some (the engine then runs without it, remembered).
    crashed = bool(machine.repack_crashes())
    assert data["settings"] == {
        "threads": usable_cpus(),
        "flash_attn": False,  # off on the CPU unless tuned or asked for
        "exact_batches": False,
        "repack": not crashed,
        # transparent huge pages where the kernel offers them on request (or to everyone)
        "huge_pages": huge_pages.available(),
        "weights_in_memory": huge_pages.available(),  # the CPU holds them, and they fit
        "extra_buffers": llama_cpp_extra_buffers() if not crashed else [],
        "n_gpu_layers": 0,
        "tuned": False,
    }


def llama_cpp_extra_buffers() -> list[str]:
    """The extra CPU buffer types llama.cpp itself puts the bundled model's weights in, read
    from its own log of a plain load (its defaults: extra buffers on, no GPU layers)."""
    load = (
        "import llama_cpp, sys; from chatapp.models.bundled import smollm2_path; "
        "llama_cpp.Llama(str(smollm2_path()), n_ctx=256, n_gpu_layers=0, verbose=True)"
    )
    r = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    found = re.findall(r"load_tensors:\s+(\S+) model buffer size", r.stderr)
    assert found, "llama.cpp's log names no model buffer"
    return list(dict.fromkeys(b for b in found if b.upper() in {"AMX", "CPU_REPACK", "KLEIDIAI"}))


@pytest.mark.slow
def test_ask_honours_the_config_sampler_and_the_flags(fresh_dirs):
    config = fresh_dirs / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("flash_attn = true\nthreads = 1\n[sampler]\nmax_tokens = 3\n")
    r = run_cli("ask", "Count to twenty.", "--json", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["completion_tokens"] == 3 and data["stop_reason"] == "max_tokens"
    assert data["settings"]["flash_attn"] is True and data["settings"]["threads"] == 1
    r = run_cli("ask", "Hi", "--json", "--max-tokens", "2", "--no-flash-attn", "--no-repack")
    settings = json.loads(r.stdout)["settings"]
    assert settings["flash_attn"] is False and settings["repack"] is False


@pytest.mark.slow
def test_tune_measures_saves_and_the_next_load_uses_it(fresh_dirs):
    r = run_cli("tune", "--depth", "0", "--depth", "64", "--tokens", "8", "--ctx", "256", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    configs = {(x["flash_attn"], x["threads"]) for x in report["results"]}
    assert {(False, usable_cpus()), (True, usable_cpus())} <= configs
    for row in report["results"]:
        assert not row["error"], row
        assert row["decode_tps"]["0"] > 0 and row["decode_tps"]["64"] > 0
        assert row["prefill_tps"] > 0
    best = report["best"]
    winner = max(report["results"], key=lambda x: x["score"])
    assert best == {k: winner[k] for k in ("flash_attn", "threads", "repack")}
    r = run_cli("ask", "Hi", "--json", "--max-tokens", "2")
    settings = json.loads(r.stdout)["settings"]
    assert settings["tuned"] is True
    assert (settings["flash_attn"], settings["threads"]) == (best["flash_attn"], best["threads"])


@pytest.mark.slow
def test_tokenize_prints_ids_and_pieces():
    r = run_cli("tokenize", "Hello world", "--json")
    assert r.returncode == 0, r.stderr
    pieces = json.loads(r.stdout)
    assert "".join(p["piece"] for p in pieces) == "Hello world"
    assert all(isinstance(p["id"], int) for p in pieces)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ask", "hi", "--model", "/nonexistent/model.gguf"], "model file not found"),
        (["ask", "hi", "--top-p", "2.0"], "Invalid value for '--top-p'"),
        (["ask", "hi", "--top-k", "-1"], "Invalid value for '--top-k'"),
        (["ask", "hi", "--temperature", "-1"], "Invalid value for '--temperature'"),
        (["ask", "hi", "--top-k", "abc"], "valid integer"),
        (["ask", "hi", "--ctx", "0"], "--ctx"),
        (["ask", "hi", "--bogus"], "No such option: --bogus"),
    ],
)
def test_bad_input_is_one_error_line(args, expected, tmp_path):
    r = run_cli(*args, timeout=60)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert "Traceback" not in r.stderr


def test_not_a_gguf_file_via_cli(tmp_path):
    bad = tmp_path / "fake model.gguf"
    bad.write_bytes(b"PK\x03\x04 zip file")
    r = run_cli("ask", "hi", "--model", str(bad))
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == f"error: {bad} is not a GGUF model file (it is a ZIP archive, e.g. a PyTorch "
        "checkpoint; convert it to GGUF first)"
    )


@pytest.mark.slow
def test_bench_measures_every_contender_and_pairs_the_ratios():
    r = run_cli(
        "bench", "--reps", "2", "--tokens", "16", "--prompt-tokens", "32", "--json", timeout=300
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert set(report["medians"]) == {"engine", "llama-cpp-python", "bare decode"}
    for name, m in report["medians"].items():
        assert len(m["runs"]) == 2, name
        assert all(run["decode_tps"] > 0 and run["prefill_tps"] > 0 for run in m["runs"])
        assert m["tokens"] == 16
    ratios = report["ratios"]
    assert set(ratios) == {
        "engine/llama-cpp-python",
        "engine/bare decode",
        "llama-cpp-python/bare decode",
    }
    engine, bare = report["medians"]["engine"]["runs"], report["medians"]["bare decode"]["runs"]
    by_hand = sorted(e["decode_tps"] / b["decode_tps"] for e, b in zip(engine, bare, strict=True))
    assert ratios["engine/bare decode"]["decode"] == pytest.approx(sum(by_hand) / 2)


def test_bench_ends_llama_bench_runs_on_a_whole_kv_block_that_fits_the_context():
    from chatapp.commands.bench.speed import aligned_tokens

    # llama-bench's context is depth + tokens: 1024 + 128 attends 1152 cells, a chat 1280
    assert aligned_tokens(1024, 128, n_ctx=4096) == 256
    assert aligned_tokens(1024, 256, n_ctx=4096) == 256  # already whole: unchanged
    assert aligned_tokens(32, 16, n_ctx=4096) == 224
    assert aligned_tokens(1024, 128, n_ctx=1200) == 128  # 1280 would not fit: as asked


def test_best_llama_bench_is_the_faster_configuration_not_the_luckier_sample():
    from chatapp.commands.bench.speed import Run, best_of

    fa0 = [Run(200, 105, 256), Run(210, 80, 256), Run(205, 81, 256)]  # median decode 81
    fa1 = [Run(250, 99, 256), Run(240, 88, 256), Run(260, 90, 256)]  # median decode 90
    best = best_of(fa0, fa1)
    assert [r.decode_tps for r in best] == [99, 88, 90]  # fa1's runs, its lucky rep 1 included
    assert [r.prefill_tps for r in best] == [250, 240, 260]
    # decode and prefill each take their own best configuration
    assert [r.prefill_tps for r in best_of(fa0, [Run(1, 99, 256)] * 3)] == [200, 210, 205]


def test_bench_ui_says_why_when_the_model_does_not_load(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model" * 100)
    r = run_cli("bench", "--ui", "--model", str(bad), timeout=60)  # (it used to wait forever)
    assert r.returncode == 1
    assert "the model did not load" in r.stderr and "not a GGUF model file" in r.stderr
    assert "Traceback" not in r.stderr


def test_conflicting_flags_are_a_usage_error_exit_2(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"  # never opened: refused before any work
    r = run_cli("compare", str(a), str(b), "--json", "--csv", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["error: choose one of --json, --csv and --markdown"]
    assert "Traceback" not in r.stderr and r.stdout == ""


def run_main(monkeypatch, argv: list[str], raised: BaseException | None = None) -> int:
    """chatapp.cli.main in-process; `raised` replaces what the command would do."""
    import typer

    from chatapp import cli

    if raised is not None:

        class Raising:
            def main(self, **_kw):
                raise raised

        monkeypatch.setattr(typer.main, "get_command", lambda _app: Raising())
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    return info.value.code


def test_main_turns_each_kind_of_error_into_one_line(monkeypatch, capsys):
    import typer

    from chatapp.engine.protocol import EngineError
    from chatapp.errors import ChatappError, ModelFileError, UsageError

    cases = [
        (UsageError("choose one of --a and --b"), 2, "error: choose one of --a and --b"),
        (ModelFileError("x.gguf is not a GGUF model file"), 1, "error: x.gguf is not a GGUF"),
        (EngineError("the server went away"), 1, "error: the server went away"),
        (ChatappError("something to fix"), 1, "error: something to fix"),
        (typer.Abort(), 130, "error: aborted"),
        (KeyboardInterrupt(), 130, "error: interrupted"),
    ]
    for exc, code, line in cases:
        assert run_main(monkeypatch, [], exc) == code, exc
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith(line), err


def test_main_usage_errors_and_help(monkeypatch, capsys):
    assert run_main(monkeypatch, ["ask", "hi", "--bogus"]) == 2
    assert capsys.readouterr().err.strip() == "error: No such option: --bogus"
    assert run_main(monkeypatch, ["history"]) == 0  # no_args_is_help: the help, exit 0
    out = capsys.readouterr()
    assert "Saved conversations." in out.out and out.err == ""
    with pytest.raises(ValueError):  # not a user error: a bug keeps its traceback
        run_main(monkeypatch, [], ValueError("a bug"))


@pytest.mark.slow
def test_ask_with_ngram_drafts_reports_them(fresh_dirs):
    text = (
        "The keeper climbed the hundred and twelve steps to the lantern room every morning "
        "and cleaned the great lens with a soft cloth."
    )
    r = run_cli(
        "ask", f"Repeat this sentence exactly: {text}", "--json", "--temperature", "0",
        "--max-tokens", "40", "--draft", "ngram",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    spec = data["speculation"]
    assert spec["draft"] == "ngram" and spec["drafted"] >= spec["accepted"] > 0
    assert sum(t["drafted"] for t in data["tokens"]) == spec["accepted"]
    assert data["breakdown"]["verdict"] and data["breakdown"]["parts"][0]["name"] == "load"
    plain = run_cli("ask", "Hi", "--max-tokens", "4", "--draft", "off")
    assert plain.returncode == 0 and "drafts" not in plain.stderr


@pytest.mark.slow
def test_config_draft_key_turns_drafts_on_and_a_missing_draft_model_is_one_line(fresh_dirs):
    config = fresh_dirs / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('draft = "ngram"\n', encoding="utf-8")
    r = run_cli("ask", "Count: 1 2 3 1 2 3 1 2 3", "--max-tokens", "12", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert "ngram drafts" in r.stderr
    r = run_cli("ask", "Hi", "--draft", str(fresh_dirs / "missing.gguf"))
    assert r.returncode != 0
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith("error:") and "missing.gguf" in line


@pytest.mark.parametrize(
    ("mode", "given", "named"),
    [
        (["--ui"], ["--depth", "300"], "--depth"),
        (["--terminal"], ["--llama-bench", "/x"], "--llama-bench"),
        (["--draft", "ngram"], ["--depth", "300"], "--depth"),
        (["--alternatives", "4"], ["--depth", "300", "--llama-bench", "/x"], "--depth and --llama"),
    ],
)
def test_bench_refuses_options_its_mode_would_ignore(mode, given, named):
    r = run_cli("bench", *mode, *given)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert line.startswith(f"error: {named}") and "does not take" in line and "\n" not in line


def test_the_draft_bench_says_where_the_first_pair_that_parted_parted():
    """`bench --draft` runs several (plain, drafted) pairs; a pair whose outputs part (a
    near-tie that batched quantized matmuls round the other way) is reported with its token,
    not only the last pair's."""
    from chatapp.commands.bench.draft import Side, task_report
    from chatapp.metrics import GenerationStats

    def side(tps: float, ids: tuple[int, ...]) -> Side:
        return Side(tps, ids, GenerationStats(draft_tokens=4, draft_accepted=3))

    same = (1, 2, 3, 4)
    pairs = [
        (side(100.0, same), side(150.0, same)),
        (side(100.0, same), side(130.0, (1, 2, 9, 4))),
        (side(100.0, same), side(140.0, same)),
    ]
    r = task_report(pairs)
    assert not r["same_output"] and r["first_difference"] == 2
    assert r["speedup"] == pytest.approx(1.4)
    same_pairs = [pairs[0], pairs[2]]
    assert (
        task_report(same_pairs)["same_output"]
        and task_report(same_pairs)["first_difference"] is None
    )


def opened_chat(monkeypatch, argv: list[str]) -> tuple[int, list]:
    """main(argv) with the TUI's launcher replaced: its exit code and what the chat got."""
    from chatapp.ui import launch

    calls: list = []
    monkeypatch.setattr(launch, "run_chat_app", lambda options, **kw: calls.append((options, kw)))
    return run_main(monkeypatch, argv), calls


def test_bare_chatapp_takes_the_chat_options(fresh_dirs, monkeypatch, capsys):
    code, calls = opened_chat(monkeypatch, ["--no-autotune", "--ctx", "1024", "--threads", "2"])
    assert code == 0 and len(calls) == 1, capsys.readouterr().err
    options, kw = calls[0]
    assert kw["config"].autotune is False
    assert options.n_ctx == 1024 and options.n_threads == 2
    assert options.model_path == bundled()  # no model named: the bundled one, as `chatapp`
    code, calls = opened_chat(monkeypatch, ["--ctx", "512", bundled()])  # a model after them
    assert code == 0 and calls[0][0].n_ctx == 512 and calls[0][0].model_path == bundled()
    code, calls = opened_chat(monkeypatch, [])
    assert code == 0 and calls[0][1]["config"].autotune is True  # the config's default


def test_bare_chatapp_still_dispatches_commands_and_its_own_help(fresh_dirs, monkeypatch, capsys):
    code, calls = opened_chat(monkeypatch, ["history", "list"])
    assert code == 0 and calls == []
    assert capsys.readouterr().err.strip() == "no conversations yet"
    code, calls = opened_chat(monkeypatch, ["--help"])
    out = capsys.readouterr().out
    assert code == 0 and calls == [] and "Commands" in out and "history" in out
    code, calls = opened_chat(monkeypatch, ["--no-such-flag"])
    assert code == 2 and calls == []
    assert capsys.readouterr().err.strip() == "error: No such option: --no-such-flag"


def test_an_error_line_on_a_terminal_shows_escape_sequences_as_symbols(monkeypatch):
    import io

    from chatapp.errors import ModelFileError

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert run_main(monkeypatch, [], ModelFileError("x\x1b]0;pwned\x07.gguf is gone")) == 1
    assert err.getvalue() == "error: x␛]0;pwned␇.gguf is gone\n"


def test_ctrl_c_stops_an_ask_started_with_sigint_ignored(fresh_dirs):
    """Every command starts at the same entry point: a reply that streams from a server
    stops on SIGINT too, although the command was started with SIGINT ignored."""
    srv = StubServer()
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()

    def one_token_then_silence(h, _body) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        delta = {"choices": [{"delta": {"content": "Hello"}, "finish_reason": None}]}
        h.wfile.write(f"data: {json.dumps(delta)}\n\n".encode())
        h.wfile.flush()
        srv.release.wait(120)  # (set when the test ends)

    srv.routes[("POST", "/v1/chat/completions")] = one_token_then_silence
    cmd = [*SIGINT_IGNORED, sys.executable, "-m", "chatapp.cli", "ask", "hi", "--server", srv.url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        assert select.select([proc.stdout], [], [], 60)[0], "no token in 60 s"
        assert os.read(proc.stdout.fileno(), 5) == b"Hello"  # the reply is streaming
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # (an ask that ignored the signal does not outlive the test)
        proc.wait()
        srv.release.set()
        srv.shutdown()
        srv.server_close()
    assert proc.returncode == 130
    assert b"Traceback" not in err


def sampler_flag_cases():
    """Each sampler flag of `ask` with values just outside its range, nan and inf."""
    from chatapp.cli.options import CLI_SAMPLERS

    for row in CLI_SAMPLERS:
        flag = "--" + row.name.replace("_", "-")
        b = row.bound
        step = 1 if row.whole else b.step
        bad = [b.low - step, b.high + step] + ([] if row.whole else ["nan", "inf", "-inf"])
        for value in bad:
            yield pytest.param(flag, f"{value:g}" if isinstance(value, float) else str(value),
                               id=f"{flag}={value}")  # fmt: skip


@pytest.mark.parametrize(("flag", "value"), list(sampler_flag_cases()))
def test_a_sampler_flag_out_of_its_table_range_is_a_usage_error_naming_it(
    monkeypatch, capsys, flag, value
):
    """Refused by the option itself (exit 2, the flag named), as --ctx is, not by the
    settings after the command began (exit 1, 'temperature must be ...')."""
    assert run_main(monkeypatch, ["ask", "hi", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: Invalid value for '{flag}': "), err
    assert len(err.strip().splitlines()) == 1


def test_the_sampler_flags_own_check_refuses_nan_which_click_ranges_let_through():
    import click
    import typer

    from chatapp.cli.options import _finite

    assert click.FloatRange(0, 2).convert(float("nan"), None, None) != 0  # (nan passes)
    for value in (float("nan"), float("inf")):
        with pytest.raises(typer.BadParameter, match="is not a number from 0 to 2"):
            _finite(0, 2)(value)
    assert _finite(0, 2)(1.5) == 1.5 and _finite(0, 2)(None) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["ask", ""],
        ["ask", "  \n\t"],
        ["ask", "--raw", ""],
        ["inside", ""],
        ["inside", " ", "--raw"],
        ["compare", "a.gguf", "b.gguf", "--prompt", ""],
        ["compare", "a.gguf", "b.gguf", "--prompt", "\n"],
        ["steer", "meter", "happy", " "],
    ],
    ids=lambda argv: " ".join(repr(a) for a in argv),
)
def test_an_empty_or_blank_prompt_is_one_sentence_in_every_command_that_takes_one(argv):
    r = run_cli(*argv, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.fullmatch(
        r"error: Invalid value for '(prompt|--prompt|text)': it is (empty|only whitespace): "
        r"give some text",
        lines[0],
    ), lines[0]
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("ask", "hi", "--json-schema", ""),
        ("ask", "hi", "--grammar", " "),
        ("bench", "--reps", str(10**6)),
        ("bench", "--tokens", str(10**12)),
        ("tune", "--tokens", str(10**12)),
    ],
    ids=["empty-schema", "blank-grammar", "huge-reps", "huge-bench-tokens", "huge-tune-tokens"],
)
def test_an_empty_file_option_or_a_count_past_its_limit_is_refused(fresh_dirs, args):
    """The walk's leftovers: an empty --json-schema ran with no schema at all; a billion
    repetitions or tokens were taken and ran until killed."""
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
