"""Pulling from the Hub, against a fake Hub on 127.0.0.1: specs, llama.cpp's quant rule, the
Hugging Face cache layout, resume after a kill, sha256, gated repos, disk space, errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.hub import serving
from helpers import SIGINT_IGNORED

from chatapp.errors import HubError, UsageError
from chatapp.models.hub import picker
from chatapp.models.hub.pull import find_cached, pull
from chatapp.models.hub.repo_files import Part, choose, group_parts, list_repo
from chatapp.models.hub.speed import Calibration
from chatapp.models.sources import hf_cache
from chatapp.models.specs import parse_spec

REPO = "test/Tiny-GGUF"
MB = 1 << 20


def blob(n: int, seed: int = 1) -> bytes:
    """n bytes that differ per seed (a sha256 per file)."""
    return (bytes([seed]) * 1024 + os.urandom(16)) * (n // 1040) + b"\0" * (n % 1040)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with serving(tmp_path / "hf-hub", monkeypatch) as h:
        yield h


def files(*names: str) -> list:
    return group_parts([Part(n, 1, "x") for n in names])


# ---- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "repo", "quant", "filename"),
    [
        ("bartowski/Qwen3-8B-GGUF", "hf", "bartowski/Qwen3-8B-GGUF", "", ""),
        ("bartowski/Qwen3-8B-GGUF:q4_k_m", "hf", "bartowski/Qwen3-8B-GGUF", "q4_k_m", ""),
        ("hf.co/unsloth/gemma-3-1b-it-GGUF:Q8_0", "hf", "unsloth/gemma-3-1b-it-GGUF", "Q8_0", ""),
        ("https://huggingface.co/a/b", "hf", "a/b", "", ""),
        ("a/b:b-Q2_K.gguf", "hf", "a/b", "", "b-Q2_K.gguf"),
        ("models/x.gguf", "path", "", "", ""),
        ("./a/b", "path", "", "", ""),
        ("/abs/a/b", "path", "", "", ""),
        ("plain.gguf", "path", "", "", ""),
    ],
)
def test_a_model_name_is_parsed(text, kind, repo, quant, filename):
    spec = parse_spec(text)
    assert (spec.kind, spec.repo, spec.quant, spec.filename) == (kind, repo, quant, filename)


def test_an_existing_folder_pair_is_a_path_not_a_repo(tmp_path, monkeypatch):
    (tmp_path / "user" / "repo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_spec("user/repo").kind == "path"


def test_ollama_names():
    spec = parse_spec("ollama:qwen3:4b")
    assert (spec.kind, spec.name, spec.tag) == ("ollama", "qwen3", "4b")
    assert parse_spec("ollama:llama3.2").tag == "latest"
    hf = parse_spec("ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    assert (hf.name, hf.tag) == ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    with pytest.raises(UsageError):
        parse_spec("ollama:")


def test_llama_cpp_rule_picks_q4_k_m_then_q8_0_then_the_first():
    many = files("m-Q2_K.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-f16.gguf")
    assert choose(many, REPO).filename == "m-Q4_K_M.gguf"
    assert choose(files("m-Q2_K.gguf", "m-Q8_0.gguf"), REPO).filename == "m-Q8_0.gguf"
    assert choose(files("mmproj-m-f16.gguf", "m-Q2_K.gguf", "m-Q3_K_S.gguf"), REPO).filename == (
        "m-Q2_K.gguf"
    )
    assert choose(many, REPO, quant="q2_k").filename == "m-Q2_K.gguf"  # case-insensitive
    assert choose(many, REPO, filename="m-Q8_0.gguf").filename == "m-Q8_0.gguf"


def test_choose_says_what_the_repo_has():
    many = files("m-Q2_K.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf")
    with pytest.raises(HubError, match=r"has no Q5_K_M file: it has Q2_K, Q8_0$"):
        choose(many, REPO, quant="Q5_K_M")
    with pytest.raises(HubError, match="vision projector"):
        choose(many, REPO, filename="mmproj-m-f16.gguf")
    with pytest.raises(HubError, match="has no GGUF files"):
        choose([], REPO)


def test_split_parts_are_one_model():
    grouped = files("big-Q8_0-00002-of-00002.gguf", "big-Q8_0-00001-of-00002.gguf", "s-Q2_K.gguf")
    big = next(f for f in grouped if f.filename.startswith("big"))
    assert [p.filename for p in big.parts] == [
        "big-Q8_0-00001-of-00002.gguf",
        "big-Q8_0-00002-of-00002.gguf",
    ]
    assert big.quant == "Q8_0" and big.size == 2


# ---- pulls ---------------------------------------------------------------------------------


def test_pull_writes_the_hugging_face_cache_layout_and_is_shared(hub):
    data = blob(3 * MB)
    hub.add(REPO, "tiny-Q8_0.gguf", data)
    got = pull(f"{REPO}:Q8_0")
    assert got.resumed_from == 0 and got.size_bytes == len(data)
    folder = hf_cache.repo_folder(REPO)
    assert got.path == folder / "snapshots" / hub.repos[REPO].commit / "tiny-Q8_0.gguf"
    assert got.path.is_symlink() and got.path.resolve() == folder / "blobs" / got.sha256
    assert (folder / "refs" / "main").read_text() == hub.repos[REPO].commit
    assert got.path.read_bytes() == data
    # huggingface_hub (and so transformers, llama.cpp's -hf) finds the same file, offline
    from huggingface_hub import hf_hub_download

    shared = hf_hub_download(
        REPO, "tiny-Q8_0.gguf", local_files_only=True, cache_dir=os.environ["HF_HUB_CACHE"]
    )
    assert Path(shared) == got.path


def test_a_cached_model_starts_with_no_network(hub, monkeypatch):
    hub.add(REPO, "tiny-Q8_0.gguf", blob(MB))
    first = pull(REPO)
    seen = len(hub.requests)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    again = pull(REPO)
    assert again.path == first.path and again.resumed_from is None
    assert find_cached(parse_spec(f"{REPO}:q8_0")) == first.path
    assert len(hub.requests) == seen


def test_offline_and_missing_is_one_sentence(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as info:
        pull(f"{REPO}:Q8_0")
    assert "not on this machine" in str(info.value) and "\n" not in str(info.value)
    assert hub.requests == []


def test_a_sha256_mismatch_deletes_everything_and_is_never_listed(hub):
    hub.add(REPO, "bad-Q8_0.gguf", blob(MB), sha256="0" * 64)
    with pytest.raises(HubError, match="did not match the Hub's sha256 and was deleted"):
        pull(f"{REPO}:Q8_0")
    folder = hf_cache.repo_folder(REPO)
    left = [p for p in folder.rglob("*") if p.is_file() or p.is_symlink()]
    assert [p for p in left if "blobs" in p.parts or "snapshots" in p.parts] == []
    assert hf_cache.cached_ggufs(REPO) == []


def test_gated_repo_asks_for_a_login_and_the_token_never_reaches_the_storage(hub, monkeypatch):
    hub.add(REPO, "tiny-Q8_0.gguf", blob(MB))
    hub.repos[REPO].gated = True
    with pytest.raises(HubError, match=r"is gated: accept its licence on .*hf auth login"):
        pull(REPO)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    got = pull(REPO)  # the fake storage answers 400 if Authorization followed the redirect
    assert got.path.exists()
    auth = [h for m, p, h in hub.requests if "/resolve/" in p]
    assert auth and all(h.get("Authorization") == "Bearer hf_test_token" for h in auth)


def test_no_such_repo_file_and_server_errors(hub):
    with pytest.raises(HubError, match="no model repo test/Nope"):
        pull("test/Nope")
    hub.add(REPO, "tiny-Q8_0.gguf", blob(MB))
    with pytest.raises(HubError, match="has no file other.gguf"):
        pull(f"{REPO}:other.gguf")
    hub.fail_status = 503
    with pytest.raises(HubError, match=r"\(503, a server error\): try again"):
        pull(f"{REPO}:Q8_0")


def test_no_network_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(HubError, match="cannot be reached"):
        list_repo(REPO)


def test_not_enough_disk_is_refused_before_the_first_byte(hub):
    hub.add(REPO, "huge-Q8_0.gguf", blob(MB), size=1 << 60)
    with pytest.raises(HubError, match=r"needs [\d.]+ GB, [\d.]+ GB free on /"):
        pull(REPO)
    assert not [p for p in hf_cache.repo_folder(REPO).rglob("*") if p.is_file()] or all(
        p.suffix == ".lock" for p in hf_cache.repo_folder(REPO).rglob("*") if p.is_file()
    )
    assert not any("/cdn/" in p for _, p, _ in hub.requests)


def test_a_dropped_connection_resumes_on_the_next_try(hub):
    data = blob(4 * MB)
    f = hub.add(REPO, "tiny-Q8_0.gguf", data)
    hub.drop_after = MB
    with pytest.raises(HubError, match="stopped at .* run the same command again; it resumes"):
        pull(REPO)
    hub.drop_after = None
    notes = []
    got = pull(REPO, say=notes.append)
    assert notes and notes[0].startswith("resuming tiny-Q8_0.gguf at 1.")
    assert got.resumed_from >= MB and got.path.read_bytes() == data
    assert f.served <= len(data) * 1.05  # bytes fetched twice: under 5% of the file


def test_split_files_are_pulled_together(hub):
    one, two = blob(MB, 1), blob(MB, 2)
    hub.add(REPO, "big-Q8_0-00001-of-00002.gguf", one)
    hub.add(REPO, "big-Q8_0-00002-of-00002.gguf", two)
    got = pull(f"{REPO}:Q8_0")
    assert got.path.name == "big-Q8_0-00001-of-00002.gguf" and got.size_bytes == 2 * MB
    assert (got.path.parent / "big-Q8_0-00002-of-00002.gguf").read_bytes() == two


def test_update_downloads_only_what_changed_after_saying_how_big(hub):
    hub.add(REPO, "tiny-Q8_0.gguf", blob(MB, 1))
    first = pull(REPO)
    notes = []
    assert pull(REPO, update=True, say=notes.append).path == first.path
    assert notes == [f"{REPO}/tiny-Q8_0.gguf is up to date (commit {first.commit[:8]})"]
    hub.add(REPO, "tiny-Q8_0.gguf", blob(2 * MB, 3))
    hub.new_commit(REPO)
    assert pull(REPO).path == first.path  # an upstream change never downloads by itself
    notes.clear()
    new = pull(REPO, update=True, say=notes.append)
    assert "changed upstream: downloading 2.1 MB" in notes[0]
    assert new.path != first.path and new.size_bytes == 2 * MB


def _partial_size(repo: str) -> int:
    found = list(hf_cache.repo_folder(repo).glob("blobs/*.incomplete"))
    return found[0].stat().st_size if found else 0


def test_a_killed_pull_resumes(hub):
    data = blob(24 * MB)
    f = hub.add(REPO, "tiny-Q8_0.gguf", data)
    hub.throttle_bps = 8 * MB
    proc = subprocess.Popen(
        [sys.executable, "-m", "chatapp.cli", "pull", f"{REPO}:Q8_0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while _partial_size(REPO) < 4 * MB and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = _partial_size(REPO)
    assert 4 * MB <= partial < len(data)
    hub.throttle_bps = None
    served_before = f.served
    r = subprocess.run(
        [sys.executable, "-m", "chatapp.cli", "pull", f"{REPO}:Q8_0", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["resumed_from"] >= partial and out["size_bytes"] == len(data)
    assert set(out) >= {"path", "sha256", "size_bytes", "resumed_from"}
    assert Path(out["path"]).read_bytes() == data
    refetched = (f.served - served_before) - (len(data) - out["resumed_from"])
    assert refetched < 0.05 * len(data)
    assert "resuming tiny-Q8_0.gguf" in r.stderr and "resumed from" in r.stderr


# ---- the quant picker ----------------------------------------------------------------------


def test_the_picker_shows_each_files_decode_ceiling_here(hub, fresh_dirs):
    from chatapp import machine

    hub.add(REPO, "m-Q8_0.gguf", blob(4 * MB, 4))
    hub.add(REPO, "m-Q2_K.gguf", blob(2 * MB, 2))
    listing = list_repo(REPO)
    before = picker.rows(listing, 512, None, (None, 1 << 34))
    assert all(r.decode_ceiling_tps is None and "≤" not in r.speed_text() for r in before)
    machine.remember_ceilings({"mem_read_gbps": 20.0, "compute_gflops": 100.0})
    rows = picker.rows(listing, 512, None, (None, 1 << 34))
    for r in rows:
        assert r.decode_ceiling_tps == pytest.approx(20e9 / r.size_bytes)
        assert r.speed_text() == f"- ≤{r.decode_ceiling_tps:.0f}"
    assert rows[0].decode_ceiling_tps > rows[1].decode_ceiling_tps  # the smaller file: faster


def test_picker_recommends_the_largest_that_fits_with_headroom_up_to_q8_0(hub):
    for quant, size in (("Q2_K", 2), ("Q4_K_M", 3), ("Q8_0", 5), ("F16", 9)):
        hub.add(REPO, f"m-{quant}.gguf", blob(size * MB, size))
    listing = list_repo(REPO)
    cal = Calibration(1e9, 100.0, "bundled", 10_000_000, 0.0)
    roomy = picker.rows(listing, 512, cal, (None, 1 << 34))
    best = [r for r in roomy if r.recommended]
    assert [r.quant for r in best] == ["Q8_0"]  # F16 fits too, but gains nothing worth it
    assert all(r.fits and r.where == "RAM" for r in roomy)
    f16 = next(r for r in roomy if r.quant == "F16")
    assert f16.expected_decode_tps == pytest.approx(1e9 / (9 * MB))
    q4 = roomy[1]
    tight = picker.rows(listing, 512, cal, (None, int(q4.memory_bytes / picker.HEADROOM) - 1))
    assert all(r.fits for r in tight)
    assert [r.quant for r in tight if r.recommended] == ["Q2_K"]  # Q4_K_M: under 20% to spare
    small = picker.rows(listing, 512, cal, (None, q4.memory_bytes))
    assert [r.quant for r in small if r.fits] == ["Q2_K", "Q4_K_M"]
    none = picker.rows(listing, 512, cal, (None, MB))
    assert not any(r.fits or r.recommended for r in none)
    gpu = picker.rows(listing, 512, cal, (1 << 34, 1 << 30))
    assert {r.where for r in gpu} == {"GPU"}


def test_pull_list_json_has_the_documented_keys(hub):
    hub.add(REPO, "m-Q8_0.gguf", blob(MB))
    r = subprocess.run(
        [sys.executable, "-m", "chatapp.cli", "pull", REPO, "--list", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    keys = {"file", "quant", "size_bytes", "fits", "expected_decode_tps", "downloaded"}
    assert keys | {"recommended"} <= set(rows[0])
    assert rows[0]["quant"] == "Q8_0" and rows[0]["downloaded"] is False


def test_usage_errors_exit_2():
    for args in (["pull", "./x.gguf"], ["pull", REPO, "--list", "--update"]):
        r = subprocess.run(
            [sys.executable, "-m", "chatapp.cli", *args], capture_output=True, text=True
        )
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


MISTYPED = ["user--x/m", "a/b..c", "a/-x"]  # chatapp's own pattern took these, the Hub does not


@pytest.mark.parametrize("name", [*MISTYPED, "a/b.git:Q8_0", "hf.co/u/" + "r" * 97])
def test_a_name_the_hub_refuses_is_refused_as_it_is_read(name):
    with pytest.raises(UsageError) as info:
        parse_spec(name)
    message = str(info.value)
    assert message.startswith(f"{name!r} is not a Hugging Face model name (")
    assert message.endswith("): give USER/REPO, USER/REPO:QUANT or USER/REPO:FILE.gguf")
    assert "\n" not in message and not re.search(r"\.\s+[A-Z]", message)  # one sentence


def test_the_hub_errors_handler_turns_the_hubs_name_check_into_a_sentence():
    from huggingface_hub.utils import validate_repo_id

    from chatapp.models.hub.client import hub_errors

    with pytest.raises(HubError, match=r"^'a/-x' is not a name the Hub takes \("):
        with hub_errors("a/-x"):
            validate_repo_id("a/-x")


@pytest.mark.parametrize("name", MISTYPED)
@pytest.mark.parametrize(
    "command", [["pull"], ["pull", "--list"], ["chat"], ["ask", "hi", "-m"]], ids=" ".join
)
def test_a_mistyped_repo_name_is_one_sentence_in_each_command(hub, command, name):
    r = subprocess.run(
        [sys.executable, "-m", "chatapp.cli", *command, name],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {name!r} is not a Hugging Face model name ({parse_spec_refusal(name)}): give "
        "USER/REPO, USER/REPO:QUANT or USER/REPO:FILE.gguf"
    ]
    assert not list(hf_cache.cache_root().glob("models--*")), "nothing asked of the Hub"


def parse_spec_refusal(name: str) -> str:
    from chatapp.models.specs import hub_refuses

    return hub_refuses(name)


def test_search_lists_gguf_repos_by_downloads(hub):
    hub.add("a/Qwen-GGUF", "q-Q8_0.gguf", b"x" * 10)
    hub.add("b/Qwen-Small-GGUF", "q-Q8_0.gguf", b"y" * 10)
    hub.repos["a/Qwen-GGUF"].downloads = 5
    hub.repos["b/Qwen-Small-GGUF"].downloads = 50
    from chatapp.models.hub.search import search

    assert [f.repo for f in search("qwen")] == ["b/Qwen-Small-GGUF", "a/Qwen-GGUF"]


@pytest.mark.slow
def test_a_named_model_is_pulled_then_answers(hub, model_path):
    hub.add("test/SmolLM2-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf", Path(model_path))
    cmd = [sys.executable, "-m", "chatapp.cli", "ask", "Say hi.", "-m", "test/SmolLM2-GGUF"]
    r = subprocess.run([*cmd, "--max-tokens", "8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "pulling test/SmolLM2-GGUF from the Hugging Face Hub" in r.stderr
    assert r.stdout.strip()
    served = hub.repos["test/SmolLM2-GGUF"].files["SmolLM2-135M-Instruct-Q4_1.gguf"].served
    r2 = subprocess.run([*cmd, "--max-tokens", "4"], capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0 and "pulling" not in r2.stderr
    assert hub.repos["test/SmolLM2-GGUF"].files["SmolLM2-135M-Instruct-Q4_1.gguf"].served == served


def test_a_full_disk_mid_file_is_one_sentence_and_resumes(hub, monkeypatch):
    import builtins
    import errno

    data = blob(3 * MB)
    hub.add(REPO, "tiny-Q8_0.gguf", data)
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, chunk):
            if self.n + len(chunk) > MB:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.n += len(chunk)
            return self.f.write(chunk)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def filling(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        writing = "a" in mode or "w" in mode
        return Full(f) if str(path).endswith(".incomplete") and writing else f

    monkeypatch.setattr(builtins, "open", filling)
    with pytest.raises(HubError, match="No space left on device.*free some space.*resumes"):
        pull(REPO)
    monkeypatch.setattr(builtins, "open", real_open)
    got = pull(REPO)
    assert 0 < got.resumed_from <= MB and got.path.read_bytes() == data


@pytest.mark.parametrize("start", [[], SIGINT_IGNORED], ids=["as-started", "sigint-ignored"])
def test_ctrl_c_stops_a_pull_cleanly(hub, start):
    hub.add(REPO, "tiny-Q8_0.gguf", blob(16 * MB))
    hub.hold_after = 2 * MB  # the bytes stop there until Ctrl-C is sent: never done before it
    proc = subprocess.Popen(
        [*start, sys.executable, "-m", "chatapp.cli", "pull", REPO],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _partial_size(REPO) < MB and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # (a pull that ignored the signal does not outlive the test)
        proc.wait()
    assert proc.returncode == 130
    assert "stopped; what was downloaded stays: run the same command to resume" in err
    assert "Traceback" not in err and _partial_size(REPO) >= MB


def test_no_network_fails_at_once_for_a_search_too(monkeypatch):
    import huggingface_hub

    from chatapp.models.hub.search import search

    def never(*_a, **_kw):  # its retries with backoff take ~20 s before the same answer
        raise AssertionError("huggingface_hub was asked although the Hub does not answer")

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.HfApi, "list_models", never)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", never)
    with pytest.raises(HubError, match="cannot be reached for the search for 'qwen'"):
        search("qwen")
    with pytest.raises(HubError, match="cannot be reached"):
        list_repo(REPO)
