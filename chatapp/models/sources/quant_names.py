"""What a GGUF file's name says: its quant tag, whether it is a split part or a projector."""

from __future__ import annotations

import re

# A quant tag between separators (start, end, "-", ".", "_", "/"), upper-cased first:
# Q4_K_M, Q8_0, Q4_0_4_4, Q4_K_XL, IQ2_XXS, TQ1_0, F16, BF16, FP16, F32, MXFP4(_MOE), NVFP4,
# with unsloth's "UD-" (dynamic quant) prefix kept.
_QUANT = re.compile(
    r"(?<![A-Z0-9])"
    r"((?:UD-)?(?:[IT]?Q\d+(?:_[0-9A-Z]+)*|BF16|FP16|FP32|F16|F32|MXFP4(?:_MOE)?|NVFP4))"
    r"(?![A-Z0-9])"
)
_SPLIT = re.compile(r"(?i)-([0-9]{5})-of-([0-9]{5})\.gguf\Z")  # \Z: the very end


def quant_from_name(filename: str) -> str:
    """The quant tag a GGUF file name carries, upper case, "" when none.

    The last tag in the name wins (a folder like "Q4_K_M/" counts when the file name has
    none). The tag is the text of the name, only upper-cased, never normalized (FP16 stays
    FP16), so that it finds the same file again as USER/REPO:TAG. Unsloth's dynamic quants
    keep their prefix: "Qwen3-8B-UD-Q4_K_XL.gguf" -> "UD-Q4_K_XL", which is how unsloth
    names them for `llama-cli -hf` and what tells them from a plain Q4_K_XL in the same repo.
    """
    name = _SPLIT.sub(".gguf", filename).upper()
    found = _QUANT.findall(name.removesuffix(".GGUF"))
    return found[-1] if found else ""


def split_part(filename: str) -> tuple[int, int] | None:
    """(part, of) for a split GGUF file ("-00001-of-00003.gguf"), None for a whole file."""
    m = _SPLIT.search(filename)
    return (int(m.group(1)), int(m.group(2))) if m else None


def split_names(filename: str) -> list[str]:
    """Every part's name of the split GGUF a file belongs to, in order (the file alone for a
    whole file): "m-00002-of-00003.gguf" -> m-00001-of-00003.gguf ... m-00003-of-00003.gguf."""
    m = _SPLIT.search(filename)
    if m is None:
        return [filename]
    stem, n, ext = filename[: m.start()], int(m.group(2)), filename[-5:]
    return [f"{stem}-{k:05d}-of-{n:05d}{ext}" for k in range(1, n + 1)]


def is_projector(filename: str) -> bool:
    """A multimodal projector (mmproj) file: not a model one chats with."""
    return "mmproj" in filename.lower()


def listed(filename: str) -> bool:
    """Whether a .gguf file is a model to list: no projector, and of a split model only part 1
    (llama.cpp loads the other parts from the first)."""
    part = split_part(filename)
    return not is_projector(filename) and (part is None or part[0] == 1)
