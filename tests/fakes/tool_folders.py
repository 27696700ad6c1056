"""Other tools' model folders built by hand: Ollama's manifests and blobs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def ollama_manifest(root: Path, where: str, layers: list[tuple[str, str]]) -> Path:
    """manifests/<host>/<namespace>/<model>/<tag>: a Docker v2 manifest naming its layers."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 487},
        "layers": [{"mediaType": t, "digest": f"sha256:{h}", "size": 1} for t, h in layers],
    }
    path = root / "manifests" / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def ollama_blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return digest
