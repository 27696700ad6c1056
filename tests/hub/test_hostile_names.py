"""Names from the network and other tools' folders are hostile input: a Hub listing whose file
name, sha256 or commit would be a path outside the cache, and Ollama manifests whose digest
leads out of the blobs folder or that nest without end, are refused in one sentence and
nothing outside the cache is written or deleted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakes.hub import serving

from chatapp.commands.models import models_cmd
from chatapp.errors import HubError, ModelFileError
from chatapp.models.hub.pull import pull
from chatapp.models.hub.repo_files import Listing, Part, RepoFile, list_repo
from chatapp.models.sources import hf_cache, ollama
from chatapp.models.specs import ModelSpec

REPO = "test/Tiny-GGUF"
DATA = b"GGUF" + bytes(range(256)) * 64
MODEL_LAYER = "application/vnd.ollama.image.model"


def tree(root: Path) -> dict[str, tuple[bool, bytes | str]]:
    """Every entry under root: whether a link, and its bytes (a link: where it points)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = (True, os.readlink(p))
            elif p.is_file():
                out[str(p)] = (False, p.read_bytes())
    return out


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the cache with a file a hostile name aims at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.gguf").write_bytes(b"precious")
    (folder / "tiny-Q8_0.gguf").write_bytes(b"precious too")
    return folder


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with serving(tmp_path / "hf-hub", monkeypatch) as h:
        h.add(REPO, "tiny-Q8_0.gguf", DATA)
        yield h


# snapshots/<commit>/ is four folders below tmp_path: hf-hub/models--test--Tiny-GGUF/snapshots/
HOSTILE_NAMES = [
    "../../../../outside/victim.gguf",
    "sub/../../../../../outside/victim.gguf",
    "ABSOLUTE",  # the victim's absolute path
    "..\\..\\..\\..\\outside\\victim.gguf",
    "C:victim.gguf",
    "sub//victim.gguf",
    "./victim.gguf",
    "victim\0.gguf",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_listing_naming_a_file_outside_the_snapshot_is_refused(hub, outside, name):
    name = str(outside / "victim.gguf") if name == "ABSOLUTE" else name
    pull(f"{REPO}:tiny-Q8_0.gguf")  # the blob is here: the hostile name needs no bytes
    hub.add(REPO, name, DATA)  # the same bytes under a hostile name
    before = tree(outside)
    with pytest.raises(HubError) as info:
        list_repo(REPO)
    message = str(info.value)
    assert "cannot be a path in the cache" in message and "refused" in message
    assert "\n" not in message and "\0" not in message
    # a listing built elsewhere (not by list_repo) is refused by the download itself
    listing = Listing(REPO, hub.repos[REPO].commit, (RepoFile((Part(name, len(DATA), _sha()),)),))
    spec = ModelSpec("hf", f"{REPO}:{name!r}", repo=REPO, filename=name)
    with pytest.raises(HubError, match="cannot be a path in the cache"):
        pull(spec, listing=listing)
    assert tree(outside) == before


def _sha() -> str:
    import hashlib

    return hashlib.sha256(DATA).hexdigest()


@pytest.mark.parametrize("sha", ["../../../outside/evil", "/tmp/evil", "A" * 64, "0" * 63, "x"])
def test_a_listing_with_a_sha256_that_is_no_sha256_is_refused(hub, outside, sha):
    hub.add(REPO, "evil-Q4_K_M.gguf", DATA, sha256=sha)
    before = tree(outside)
    with pytest.raises(HubError, match="that is not 64 hex digits: refused"):
        pull(REPO)  # Q4_K_M: the evil file is the one chosen
    listing = Listing(REPO, hub.repos[REPO].commit, (RepoFile((Part("e.gguf", 9, sha),)),))
    with pytest.raises(HubError, match="that is not 64 hex digits: refused"):
        pull(f"{REPO}:e.gguf", listing=listing)
    assert tree(outside) == before
    assert not list((hf_cache.repo_folder(REPO) / "blobs").glob("*"))


@pytest.mark.parametrize("commit", ["../../../outside", "/tmp", "main", "g" * 40])
def test_a_listing_with_a_commit_that_is_no_commit_is_refused(hub, outside, commit):
    first = pull(REPO)
    hub.repos[REPO].commit = commit
    before = tree(outside)
    with pytest.raises(HubError, match="that is not 40 hex digits: refused"):
        pull(REPO, update=True)
    assert tree(outside) == before and first.path.read_bytes() == DATA


# ---- Ollama manifests ------------------------------------------------------------------------


@pytest.fixture
def ollama_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "ollama"
    (root / "blobs").mkdir(parents=True)
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("CHATAPP_OTHER_TOOLS", "1")
    return root


def manifest(root: Path, model: str, text: str) -> None:
    path = root / "manifests" / "registry.ollama.ai" / "library" / model / "latest"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def layers(digest: str) -> str:
    return json.dumps(
        {"schemaVersion": 2, "layers": [{"mediaType": MODEL_LAYER, "digest": digest}]}
    )


def test_ollama_manifests_naming_blobs_outside_are_refused(ollama_root, outside):
    victim = outside / "victim.gguf"
    hostile = {
        "up": "../outside/victim.gguf",  # blobs/../outside: beside the blobs folder
        "up-prefixed": "sha256:../../outside/victim.gguf",
        "absolute": str(victim),
        "absolute-prefixed": f"sha256:{victim}",
    }
    (ollama_root / "outside").mkdir()
    (ollama_root / "outside" / "victim.gguf").write_bytes(b"precious")
    for model, digest in hostile.items():
        manifest(ollama_root, model, layers(digest))
    before = tree(outside)
    found, notes = ollama.ollama_models()
    assert found == []
    for model in hostile:
        assert f"ollama: manifest {model}:latest names a blob that is no sha256 digest" in notes
        with pytest.raises(ModelFileError, match="names a blob that is no sha256 digest"):
            ollama.resolve_ollama(model)
    assert tree(outside) == before


def test_a_manifest_nested_without_end_is_skipped_and_the_listing_goes_on(ollama_root, capsys):
    digest = "ab" * 32
    (ollama_root / "blobs" / f"sha256-{digest}").write_bytes(DATA)
    manifest(ollama_root, "good", layers(f"sha256:{digest}"))
    manifest(ollama_root, "deep", "[" * 100_000 + "]" * 100_000)
    manifest(ollama_root, "deep-object", '{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    found, notes = ollama.ollama_models()
    assert [f.spec for f in found] == ["ollama:good:latest"]
    assert any(n.startswith("ollama: manifest deep:latest cannot be read") for n in notes)
    assert any(n.startswith("ollama: manifest deep-object:latest cannot be read") for n in notes)
    with pytest.raises(ModelFileError, match="deep:latest's manifest .* cannot be read"):
        ollama.resolve_ollama("deep")
    assert models_cmd(as_json=True) == 0  # `chatapp models` lists what it can
    out, err = capsys.readouterr()
    assert "ollama:good:latest" in {e["spec"] for e in json.loads(out)}
    assert "manifest deep:latest cannot be read" in err
