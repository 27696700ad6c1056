"""Force a GPU out-of-memory on load and see the engine step its GPU layers down (gpu_check.sh).

`hold GIB`: take GPU memory (CUDA driver API, no toolkit needed) until GIB are left free, and
keep it until killed. `stepdown GIB`: load the bundled model with every layer on the GPU and a
context whose KV cache is 1.4x those GIB, so the full offload cannot fit but half of it can;
print what the engine did as one JSON line. Under --cpu (a CPU build) the same load runs with
nothing to step down from.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import signal
import sys

GIB = 1024**3
CHUNK = GIB // 4
OVERSHOOT = 1.4  # the full offload's KV cache vs the memory left free: fails; half fits
UBATCH = 64  # small: the attention mask (n_ctx x ubatch) stays far below the KV cache


def _cuda(lib: ctypes.CDLL, call: str, *args) -> None:
    code = getattr(lib, call)(*args)
    if code != 0:
        raise SystemExit(f"{call} failed with CUDA error {code}")


def _free_bytes(lib: ctypes.CDLL) -> int:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    _cuda(lib, "cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    return free.value


def hold(leave_gib: float) -> None:
    """Allocate GPU 0's memory in chunks until `leave_gib` are free; sleep until killed."""
    lib = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _cuda(lib, "cuInit", 0)
    _cuda(lib, "cuDeviceGet", ctypes.byref(dev), 0)
    _cuda(lib, "cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    _cuda(lib, "cuCtxSetCurrent", ctx)
    leave, held = int(leave_gib * GIB), 0
    while (spare := _free_bytes(lib) - leave) > 0:
        size = min(CHUNK, spare)
        ptr = ctypes.c_uint64()
        if lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) != 0:
            break
        held += size
    print(f"held {held / GIB:.1f} GiB, {_free_bytes(lib) / GIB:.2f} GiB free", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


def oom_context(shape, leave_bytes: int) -> int:
    """The context whose KV cache over every block is OVERSHOOT x the memory left free."""
    per_token = shape.kv_bytes_per_layer(1) * shape.n_layers
    return max(256, int(OVERSHOOT * leave_bytes / per_token) // 256 * 256)


def stepdown(leave_gib: float) -> dict:
    """Load with every layer on the GPU at the out-of-memory context: what the engine did."""
    from chatapp.engine.local.load import gpu_fallback
    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.engine.protocol import ALL_GPU_LAYERS, LoadOptions
    from chatapp.gguf.header import read_header
    from chatapp.models.bundled import smollm2_path
    from chatapp.models.fit import shape_from_header

    path = str(smollm2_path())
    shape = shape_from_header(read_header(path))
    n_ctx = oom_context(shape, int(leave_gib * GIB))
    options = LoadOptions(
        model_path=path, n_ctx=n_ctx, n_gpu_layers=ALL_GPU_LAYERS, n_batch=UBATCH, flash_attn=True
    )
    engine = LocalEngine(options)
    try:
        info = engine.start()
        loaded = info.n_gpu_layers
    finally:
        engine.close()
    return {
        "n_ctx": n_ctx,
        "kv_gib": round(shape.kv_bytes_per_layer(n_ctx) * shape.n_layers / GIB, 2),
        "steps": gpu_fallback.layer_steps(ALL_GPU_LAYERS, shape.n_layers),
        "loaded_gpu_layers": loaded,
        "stepped_down": any("GPU layers instead" in note for note in engine.notes),
        "notes": engine.notes,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("hold").add_argument("leave_gib", type=float)
    sub.add_parser("stepdown").add_argument("leave_gib", type=float)
    args = parser.parse_args(argv)
    if args.command == "hold":
        hold(args.leave_gib)
    else:
        print(json.dumps(stepdown(args.leave_gib)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
