"""`chatapp pull` and `chatapp search`: models from the Hugging Face Hub, on stderr a bar per
file, on stdout what was asked (a table, or JSON)."""

from __future__ import annotations

import json
import sys

from chatapp.errors import UsageError
from chatapp.models import fit
from chatapp.models.hub import picker
from chatapp.models.hub.pull import pull
from chatapp.models.hub.repo_files import list_repo
from chatapp.models.specs import parse_spec
from chatapp.progress import bars
from chatapp.textsafe import for_stream


def _say(line: str) -> None:
    print(for_stream(sys.stderr)(line), file=sys.stderr, flush=True)


def _show(text: str) -> None:
    """Print to stdout; names from the Hub show their control characters on a terminal."""
    print(for_stream(sys.stdout)(text))


def _hf_spec(text: str):
    spec = parse_spec(text)
    if spec.kind != "hf":
        raise UsageError(
            f"{text!r} is not a Hugging Face model name: give USER/REPO, USER/REPO:QUANT or "
            "USER/REPO:FILE.gguf"
        )
    return spec


def pull_cmd(specs: list[str], as_json: bool = False, update: bool = False) -> int:
    """Pull each model into the Hugging Face cache (resuming any partial download)."""
    parsed = [_hf_spec(s) for s in specs]  # every name checked before any download
    done = []
    for spec in parsed:
        try:
            with bars("bytes") as bar:
                got = pull(spec, update=update, progress=bar, say=_say)
        except KeyboardInterrupt:
            _say(
                f"\n{spec.text}: stopped; what was downloaded stays: run the same command to resume"
            )
            raise
        if got.resumed_from is None:
            _say(f"{spec.text}: already here")
        elif got.resumed_from:
            _say(f"{spec.text}: resumed from {got.resumed_from / 1e6:.1f} MB, sha256 checked")
        else:
            _say(f"{spec.text}: downloaded, sha256 checked")
        done.append(got)
        if not as_json:
            _show(str(got.path))
    if as_json:
        data = [d.to_dict() for d in done]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    return 0


def list_cmd(specs: list[str], n_ctx: int, as_json: bool = False, fresh: bool = False) -> int:
    """Each repo's GGUF files with fit, expected speed here and one recommended."""
    from chatapp.models.hub.speed import calibrate

    parsed = [_hf_spec(s) for s in specs]
    try:
        cal = calibrate(force=fresh)
    except Exception as exc:  # no speed column rather than no list
        _say(f"note: no speed estimate: the calibration decode failed ({exc})")
        cal = None
    gpu_free, ram_free = fit.free_memory()
    out = []
    for spec in parsed:
        listing = list_repo(spec.repo)
        rows = picker.rows(listing, n_ctx, cal, (gpu_free, ram_free))
        out += [{"repo": spec.repo, **r.to_dict()} for r in rows]
        if not as_json:
            _show(format_rows(spec.repo, rows, n_ctx, cal))
            best = next((r for r in rows if r.recommended), None)
            _show(
                "recommended: " + picker.reason(best, gpu_free, ram_free)
                if best
                else "recommended: none: no file fits in the free memory here"
            )
    if as_json:
        print(json.dumps(out, indent=2))
    return 0


def format_rows(repo: str, rows, n_ctx: int, cal) -> str:
    head = ("", "quant", "size", "bits/w", "memory", "fits here", "t/s here", "here", "file")
    lines = [head]
    for r in rows:
        lines.append(
            (
                "★" if r.recommended else "",
                r.quant or "?",
                f"{r.size_bytes / 1e9:.2f} GB",
                f"{r.bits_per_weight:.2f}" if r.bits_per_weight else "-",
                f"{r.memory_bytes / 1e9:.2f} GB",
                f"yes ({r.where})" if r.fits else "no",
                r.speed_text(),
                "yes" if r.downloaded else "",
                r.file + (f" (+{r.parts - 1} parts)" if r.parts > 1 else ""),
            )
        )
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    text = [f"{repo}: memory at ctx {n_ctx} (weights + KV cache + compute buffer)"]
    text += [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    ]
    if cal:
        text.append(
            f"t/s here: an estimate: the slower of reading the file ({cal.bytes_per_s / 1e9:.0f} "
            f"GB/s measured here) and the work per weight of {cal.model} "
            f"({cal.decode_tps:.0f} t/s here)"
        )
    if any(r.decode_ceiling_tps for r in rows):
        text.append(
            "≤N: the decode ceiling here, this machine's measured memory read speed / the file's "
            "size (every weight is read once a token)"
        )
    return "\n".join(text)


def search_cmd(text: str, limit: int = 20, as_json: bool = False) -> int:
    from chatapp.models.hub.search import search

    found = search(text, limit)
    if as_json:
        print(json.dumps([f.to_dict() for f in found], indent=2))
        return 0
    if not found:
        _show(f"no GGUF repos on the Hub match {text!r}")
        return 0
    width = max(len(f.repo) for f in found)
    _show(f"{'repo'.ljust(width)}  {'downloads':>10}  {'likes':>6}  updated")
    for f in found:
        _show(f"{f.repo.ljust(width)}  {f.downloads:>10,}  {f.likes:>6,}  {f.updated}")
    print("see a repo's quants: chatapp pull USER/REPO --list", file=sys.stderr)
    return 0
