"""A byte another process sets to stop llama.cpp mid-decode, read in C (no Python per node)."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

SIZE = 2  # [flag, 0]: a C string of length 1 while the flag is set, 0 while it is not


def new_flag() -> ctypes.Array[ctypes.c_byte]:
    """A flag in this process's memory (the worker's comes shared from the parent)."""
    return (ctypes.c_byte * SIZE)()


def watch(lib, ctx, flag: ctypes.Array[ctypes.c_byte]) -> Any:
    """Stop the context's decodes at the next node of the graph once `flag` is set: llama_decode
    then returns 2 and drops the positions of the batch it stopped in. The callback is libc's
    strlen on [flag, 0]: 1 while the flag is set, 0 when not, read in C, because ggml calls it
    after every node (~600 a token on the bundled model) and a Python callback would take the
    GIL each time and slow the very decodes the tune times. Returns the callback (keep it while
    the context lives), or None where libc cannot be found: decodes then run whole."""
    try:
        libc = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):
        return None
    callback = lib.ggml_abort_callback(address)
    lib.llama_set_abort_callback(ctx, callback, ctypes.addressof(flag))
    return callback
