"""The GGUF files other tools keep, found in their real layouts built here: the Hugging Face
cache, Ollama, LM Studio and llama.cpp's old cache."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.gguf_files import build, kv_str, kv_u32
from fakes.tool_folders import ollama_blob, ollama_manifest

from chatapp.commands.models import models_cmd
from chatapp.errors import ModelFileError
from chatapp.models import discovery
from chatapp.models.bundled import smollm2_path
from chatapp.models.sources import hf_cache, llamacpp, lmstudio, ollama
from chatapp.models.sources.every_tool import other_tools
from chatapp.models.sources.found import Found
from chatapp.models.sources.quant_names import listed, quant_from_name

MODEL_LAYER = "application/vnd.ollama.image.model"
PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
TEMPLATE_LAYER = "application/vnd.ollama.image.template"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(autouse=True)
def _tools(tmp_path, monkeypatch):
    """Every tool's folder is an empty one under tmp_path (hf/, ollama/, lmstudio/, llama.cpp/);
    HOME too (home/), so no default folder of the developer's can leak in."""
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "CHATAPP_OTHER_TOOLS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var, name in [
        ("HF_HUB_CACHE", "hf"),
        ("OLLAMA_MODELS", "ollama"),
        ("LMSTUDIO_MODELS", "lmstudio"),
        ("LLAMA_CACHE", "llama.cpp"),
    ]:
        (tmp_path / name).mkdir()
        monkeypatch.setenv(var, str(tmp_path / name))


def tiny(name: str) -> bytes:
    """A small valid GGUF file; the name makes its bytes (and so its blob) its own."""
    arch = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1)]
    return build([*arch, kv_str("general.name", name)])


def place(src: Path, dst: Path) -> Path:
    """The bundled model at dst: a hard link (98 MB copied only across file systems)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


@functools.cache
def smollm2_digest() -> str:
    with open(smollm2_path(), "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# ---- the layouts, as the tools write them ----------------------------------------------------


def hf_file(repo: str, name: str, data: bytes, commit: str = COMMIT) -> Path:
    """A file of a repo in the HF cache: blobs/<sha256>, snapshots/<commit>/<name> a relative
    link to it, refs/main naming the commit (as huggingface_hub writes them)."""
    folder = hf_cache.repo_folder(repo)
    blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = folder / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    if commit == COMMIT or not (folder / "refs" / "main").exists():
        (folder / "refs" / "main").write_text(COMMIT)
    return link


def ollama_tree(root: Path) -> Path:
    """The bundled model pulled as llama3.2 (two tags), a vision model with its projector, a
    model from hf.co, one from a user's namespace, one whose blob is gone, one broken file."""
    digest = smollm2_digest()
    blob = place(smollm2_path(), root / "blobs" / f"sha256-{digest}")
    llama = [(MODEL_LAYER, digest), (TEMPLATE_LAYER, ollama_blob(root, b"{{ .Prompt }}"))]
    lib = "registry.ollama.ai/library"
    ollama_manifest(root, f"{lib}/llama3.2/latest", llama)
    ollama_manifest(root, f"{lib}/llama3.2/1b", llama)
    projector = (PROJECTOR_LAYER, ollama_blob(root, b"projector"))
    ollama_manifest(
        root, f"{lib}/llava/7b", [(MODEL_LAYER, ollama_blob(root, tiny("llava"))), projector]
    )
    hf = [(MODEL_LAYER, ollama_blob(root, tiny("from hf.co")))]
    ollama_manifest(root, "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF/Q4_K_M", hf)
    mine = [(MODEL_LAYER, ollama_blob(root, tiny("mine")))]
    ollama_manifest(root, "registry.ollama.ai/someone/tiny/latest", mine)
    ollama_manifest(root, f"{lib}/gone/latest", [(MODEL_LAYER, "d" * 64)])
    (root / "manifests" / lib / "broken").mkdir()
    (root / "manifests" / lib / "broken" / "latest").write_text("{not json")
    return blob


# ---- file names ------------------------------------------------------------------------------

NAMES = [
    ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),  # bartowski
    ("Meta-Llama-3.1-8B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"),
    ("Meta-Llama-3.1-8B-Instruct-Q4_0_4_4.gguf", "Q4_0_4_4"),
    ("Qwen2.5-7B-Instruct-Q6_K_L.gguf", "Q6_K_L"),
    ("Llama-3.2-1B-Instruct-f16.gguf", "F16"),
    ("gemma-2-9b-it-bf16.gguf", "BF16"),
    ("Qwen3-8B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),  # unsloth
    ("Qwen3-30B-A3B-UD-IQ1_M.gguf", "UD-IQ1_M"),
    ("DeepSeek-R1-0528-UD-TQ1_0.gguf", "UD-TQ1_0"),
    ("gpt-oss-20b-mxfp4.gguf", "MXFP4"),  # ggml-org
    ("UD-Q2_K_XL/DeepSeek-V3-0324-UD-Q2_K_XL-00001-of-00006.gguf", "UD-Q2_K_XL"),
    ("BF16/Qwen3-235B-A22B-BF16-00002-of-00010.gguf", "BF16"),
    ("Q4_K_M/model-00001-of-00002.gguf", "Q4_K_M"),  # only the folder says
    ("llama-2-7b-chat.Q4_K_M.gguf", "Q4_K_M"),  # TheBloke
    ("mistral-7b-instruct-v0.2.Q5_K_S.gguf", "Q5_K_S"),
    ("Meta-Llama-3-8B-Instruct-Q8_0.gguf", "Q8_0"),  # lmstudio-community
    ("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "Q4_K_M"),  # Qwen
    ("qwen2-0_5b-instruct-fp16.gguf", "FP16"),
    ("Phi-3-mini-4k-instruct-q4.gguf", "Q4"),  # microsoft
    ("Mistral-7B-Instruct-v0.3.i1-IQ3_XXS.gguf", "IQ3_XXS"),  # mradermacher
    ("ggml-model-IQ4_NL.gguf", "IQ4_NL"),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
    ("Qwen2.5-Coder-7B.gguf", ""),
    ("mmproj-model-f16.gguf", "F16"),
]


@pytest.mark.parametrize(("name", "quant"), NAMES)
def test_quant_from_name(name, quant):
    assert quant_from_name(name) == quant


def test_only_first_parts_and_no_projectors_are_listed():
    assert listed("x-Q4_K_M.gguf") and listed("Q8_0/x-Q8_0-00001-of-00003.gguf")
    assert not listed("x-Q8_0-00002-of-00003.gguf")
    assert not listed("mmproj-x-f16.gguf") and not listed("x.mmproj-Q8_0.gguf")


# ---- the Hugging Face cache -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"HF_HUB_CACHE": "/a/hub"}, "/a/hub"),
        ({"HUGGINGFACE_HUB_CACHE": "/old"}, "/old"),
        ({"HF_HOME": "/h"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
        ({}, "~/.cache/huggingface/hub"),
    ],
)
def test_cache_root_is_where_huggingface_hub_looks(monkeypatch, env, want):
    monkeypatch.delenv("HF_HUB_CACHE")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert hf_cache.cache_root() == Path(want).expanduser()  # read now, not at import
    code = "from huggingface_hub import constants as c; print(c.HF_HUB_CACHE)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert Path(run.stdout.strip()) == hf_cache.cache_root()


def test_hf_cache_lists_each_model_once_with_its_name():
    repo = "bartowski/Llama-3.2-1B-Instruct-GGUF"
    q4 = hf_file(repo, "Llama-3.2-1B-Instruct-Q4_K_M.gguf", tiny("q4"))
    hf_file(repo, "Llama-3.2-1B-Instruct-Q4_K_M.gguf", tiny("q4 old"), OLD_COMMIT)
    only_old = hf_file(repo, "Llama-3.2-1B-Instruct-Q8_0.gguf", tiny("q8"), OLD_COMMIT)
    hf_file(repo, "mmproj-f16.gguf", tiny("projector"))
    hf_file(repo, "README.md", b"# readme")
    broken = hf_file(repo, "Llama-3.2-1B-Instruct-f16.gguf", tiny("f16"))
    split = "unsloth/Qwen3-GGUF"
    first_spec = "unsloth/Qwen3-GGUF:UD-Q2_K_XL"
    first = hf_file(split, "UD-Q2_K_XL/Qwen3-UD-Q2_K_XL-00001-of-00002.gguf", tiny("1/2"))
    hf_file(split, "UD-Q2_K_XL/Qwen3-UD-Q2_K_XL-00002-of-00002.gguf", tiny("2/2"))
    hf_file(split, "Q8_0/Qwen3-Q8_0-00001-of-00003.gguf", tiny("1/3"))
    hf_file(split, "Q8_0/Qwen3-Q8_0-00003-of-00003.gguf", tiny("3/3"))
    twice = "someone/two-q4"
    hf_file(twice, "a-Q4_K_M.gguf", tiny("a"))
    hf_file(twice, "b-Q4_K_M.gguf", tiny("b"))
    no_org = hf_file("gpt2", "gpt2-Q4_0.gguf", tiny("gpt2"))

    # huggingface_hub itself reads this layout, and sees every file listed here
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(hf_cache.cache_root())
    assert not info.warnings
    theirs = {f.file_path for r in info.repos for rev in r.revisions for f in rev.files}
    assert {f.path for f in hf_cache.all_cached()} <= theirs

    broken.resolve().unlink()  # the blob was deleted: the link is left dangling

    assert hf_cache.cached_ggufs(repo) == [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", q4),  # refs/main's snapshot first
        ("mmproj-f16.gguf", q4.parent / "mmproj-f16.gguf"),
        ("Llama-3.2-1B-Instruct-Q8_0.gguf", only_old),  # then the older one's other files
    ]
    found = hf_cache.all_cached()
    assert {f.source for f in found} == {"huggingface"}
    assert sorted(f.spec for f in found) == [
        str(no_org),  # a repo without USER/ has no USER/REPO name
        "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
        "bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0",
        "someone/two-q4:a-Q4_K_M.gguf",
        "someone/two-q4:b-Q4_K_M.gguf",
        "unsloth/Qwen3-GGUF:Q8_0",
        "unsloth/Qwen3-GGUF:UD-Q2_K_XL",
    ]
    by_spec = {f.spec: f for f in found}
    assert by_spec["unsloth/Qwen3-GGUF:UD-Q2_K_XL"] == Found(first, "huggingface", first_spec)
    assert by_spec["unsloth/Qwen3-GGUF:Q8_0"].note == "part 2 of 3 not in the cache"


# ---- Ollama ------------------------------------------------------------------------------------


def test_ollama_models_and_what_was_skipped(tmp_path):
    root = tmp_path / "ollama"
    blob = ollama_tree(root)
    found, notes = ollama.ollama_models()
    by_spec = {f.spec: f for f in found}
    assert sorted(by_spec) == [
        "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
        "ollama:llama3.2:1b",
        "ollama:llama3.2:latest",
        "ollama:llava:7b",
        "ollama:someone/tiny:latest",
    ]
    assert {f.source for f in found} == {"ollama"}
    assert by_spec["ollama:llama3.2:latest"].path == blob
    assert by_spec["ollama:llava:7b"].note == "its projector layer is not loaded"
    assert "ollama: llava:7b's projector layer skipped" in notes
    gone = [n for n in notes if n.startswith("ollama: manifest gone:latest names a blob")]
    assert len(gone) == 1 and "missing" in gone[0]
    assert any(n.startswith("ollama: manifest broken:latest cannot be read") for n in notes)
    assert len(notes) == 3


def test_resolve_ollama(tmp_path):
    root = tmp_path / "ollama"
    blob = ollama_tree(root)
    assert ollama.resolve_ollama("llama3.2") == blob
    assert ollama.resolve_ollama("llama3.2", "1b") == blob
    assert ollama.resolve_ollama("library/llama3.2", "1b") == blob
    assert ollama.resolve_ollama("registry.ollama.ai/library/llama3.2") == blob
    hf = ollama.resolve_ollama("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    assert hf.parent == root / "blobs"
    assert ollama.resolve_ollama("hf.co/bartowski/llama-3.2-1b-instruct-gguf", "q4_k_m") == hf
    assert ollama.resolve_ollama("someone/tiny").parent == root / "blobs"

    # the lead's resolver (specs.parse_spec -> here) gives the same file
    from chatapp.models.resolve import resolve_spec

    assert resolve_spec("ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M") == hf

    with pytest.raises(ModelFileError) as info:
        ollama.resolve_ollama("qwen3", "4b")
    message = str(info.value)
    assert message.startswith("ollama:qwen3:4b is not among Ollama's models")
    assert f"(looked in {root})" in message and "run `ollama pull qwen3:4b` first" in message
    assert "\n" not in message
    with pytest.raises(ModelFileError, match=r"manifest names a blob that is missing .*again$"):
        ollama.resolve_ollama("gone")
    with pytest.raises(ModelFileError, match="is not among"):
        ollama.resolve_ollama("../../x", "..")


def test_ollama_blob_loads_in_llama_cpp(tmp_path):
    """Blobs have no .gguf suffix: llama.cpp loads them all the same."""
    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.engine.protocol import LoadOptions

    ollama_tree(tmp_path / "ollama")
    blob = ollama.resolve_ollama("llama3.2")
    with LocalEngine(LoadOptions(model_path=str(blob), n_ctx=256, n_gpu_layers=0)) as eng:
        assert eng.info.n_vocab == 49152
        assert b"".join(t.piece for t in eng.tokenize("Hello there", special=False)) == (
            b"Hello there"
        )


def test_ollama_folders(monkeypatch, tmp_path):
    assert ollama.models_dirs() == [tmp_path / "ollama"]  # $OLLAMA_MODELS alone, as Ollama does
    monkeypatch.delenv("OLLAMA_MODELS")
    assert ollama.models_dirs() == [
        tmp_path / "home" / ".ollama" / "models",
        Path("/usr/share/ollama/.ollama/models"),
    ]


# ---- LM Studio and llama.cpp --------------------------------------------------------------------


def test_lmstudio_and_llama_cpp_files_are_named_by_their_path(monkeypatch, tmp_path):
    lms = tmp_path / "lmstudio" / "lmstudio-community" / "Meta-Llama-3-8B-Instruct-GGUF"
    lms.mkdir(parents=True)
    model = lms / "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
    model.write_bytes(tiny("lms"))
    (lms / "mmproj-model-f16.gguf").write_bytes(tiny("projector"))
    (tmp_path / "lmstudio" / "stray.gguf").write_bytes(tiny("not LM Studio's"))
    assert lmstudio.lmstudio_models() == [Found(model, "lmstudio", str(model))]

    cache = tmp_path / "llama.cpp"
    cached = cache / "bartowski_Llama-3.2-1B-Instruct-GGUF_Llama-3.2-1B-Instruct-Q4_K_M.gguf"
    cached.write_bytes(tiny("llama.cpp"))
    (cache / f"{cached.name}.etag").write_text('"etag"')
    (cache / "manifest=bartowski_Llama-3.2-1B-Instruct-GGUF=latest.json").write_text("{}")
    (cache / "bartowski_x_mmproj-f16.gguf").write_bytes(tiny("mmproj"))
    assert llamacpp.llamacpp_models() == [Found(cached, "llama.cpp", str(cached))]

    monkeypatch.delenv("LMSTUDIO_MODELS")
    monkeypatch.delenv("LLAMA_CACHE")
    home = tmp_path / "home"
    assert lmstudio.models_dirs() == [home / ".lmstudio/models", home / ".cache/lm-studio/models"]
    assert llamacpp.cache_dir() == home / ".cache" / "llama.cpp"


# ---- all together -------------------------------------------------------------------------------


def test_discover_lists_each_real_file_once(tmp_path):
    ollama_tree(tmp_path / "ollama")
    snapshot = hf_file("bartowski/SmolLM2-GGUF", "SmolLM2-Q4_K_M.gguf", tiny("hf"))
    lms = tmp_path / "lmstudio" / "bartowski" / "SmolLM2-GGUF"
    lms.mkdir(parents=True)
    (lms / "SmolLM2-Q4_K_M.gguf").symlink_to(snapshot)  # LM Studio pointed at the HF file
    entries, notes = discovery.discover_with_notes()
    other = [e for e in entries if e.source not in ("bundled", "cache", "folder")]
    assert [(e.source, e.spec) for e in other] == [
        ("huggingface", "bartowski/SmolLM2-GGUF:Q4_K_M"),
        ("ollama", "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
        ("ollama", "ollama:llama3.2:1b"),  # :latest is the same blob: one row
        ("ollama", "ollama:llava:7b"),
        ("ollama", "ollama:someone/tiny:latest"),
    ]
    assert all(e.ok for e in other) and other[0].path == str(snapshot)
    assert len(notes) == 3
    bundled = next(e for e in entries if e.source == "bundled")
    assert bundled.spec == bundled.path
    assert not [e for e in discovery.discover(include_other_tools=False) if e.source == "ollama"]


def test_a_switch_turns_the_scan_off(monkeypatch, tmp_path):
    ollama_tree(tmp_path / "ollama")
    assert other_tools()[0]
    monkeypatch.setenv("CHATAPP_OTHER_TOOLS", "0")
    assert other_tools() == ([], [])


def test_models_command_names_other_tools_models(capsys, tmp_path):
    ollama_tree(tmp_path / "ollama")
    lms = tmp_path / "lmstudio" / "lmstudio-community" / "gemma-GGUF" / "gemma-Q8_0.gguf"
    lms.parent.mkdir(parents=True)
    lms.write_bytes(tiny("gemma"))
    assert models_cmd(as_json=True) == 0
    out, err = capsys.readouterr()
    listed_ = {e["spec"]: e for e in json.loads(out)}
    assert listed_["ollama:llava:7b"]["source"] == "ollama"
    assert listed_["ollama:llava:7b"]["note"] == "its projector layer is not loaded"
    assert listed_[str(lms)]["source"] == "lmstudio" and listed_[str(lms)]["path"] == str(lms)
    assert "note: ollama: llava:7b's projector layer skipped" in err.splitlines()
    assert models_cmd() == 0
    out = capsys.readouterr().out
    rows = {line.split()[-1]: line.split()[0] for line in out.splitlines()[1:]}
    assert rows["ollama:llama3.2:1b"] == "ollama" and rows[str(lms)] == "lmstudio"
