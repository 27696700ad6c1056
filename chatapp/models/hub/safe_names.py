"""The names a Hub listing gives (file names, sha256s, the commit) checked before any becomes a
path: a listing is data from the network, and huggingface_hub refuses the same names."""

from __future__ import annotations

import re
from pathlib import Path

from chatapp.errors import HubError

_COMMIT = re.compile(r"[0-9a-f]{40}")  # a git commit id, as the Hub gives it
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DRIVE = re.compile(r"[A-Za-z]:")


def filename_problem(name: str) -> str:
    """Why a file name from a listing cannot be a path under the snapshot ("" when it can):
    it must be relative, with plain parts separated by "/" (no "..", ".", empty part,
    backslash, NUL or drive letter)."""
    if not name:
        return "it is empty"
    if "\\" in name or "\0" in name:
        return "it has a backslash or a NUL"
    if name.startswith("/") or _DRIVE.match(name):
        return "it is absolute"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "it has an empty, '.' or '..' part"
    return ""


def check_filename(repo: str, name: str) -> str:
    """The name, or HubError in one sentence when it would be a path outside the repo."""
    problem = filename_problem(name)
    if problem:
        raise HubError(
            f"the Hub's listing of {repo} names a file {name!r} that cannot be a path in the "
            f"cache ({problem}): refused, nothing was written"
        )
    return name


def check_sha256(repo: str, name: str, sha256: str) -> str:
    """The LFS sha256 ("" when the Hub gives none), or HubError when it is not 64 hex digits."""
    if sha256 and not _SHA256.fullmatch(sha256):
        raise HubError(
            f"the Hub's listing of {repo} gives {name!r} a sha256 {sha256!r} that is not 64 hex "
            "digits: refused, nothing was written"
        )
    return sha256


def check_commit(repo: str, commit: str) -> str:
    """The commit id, or HubError when it is not 40 hex digits (it names a cache folder)."""
    if not _COMMIT.fullmatch(commit):
        raise HubError(
            f"the Hub's listing of {repo} gives a commit {commit!r} that is not 40 hex digits: "
            "refused, nothing was written"
        )
    return commit


def inside(path: Path, folder: Path) -> Path:
    """The path, or HubError when, links resolved, its folder is not within `folder` (a
    link placed in the cache by someone else): nothing is written or deleted through it."""
    where = path.parent.resolve()
    if not where.is_relative_to(folder.resolve()):
        raise HubError(f"{path} leads outside {folder} (through a link): refused, nothing written")
    return path
