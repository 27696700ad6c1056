"""A reply against the ceilings: bytes x rate, each ceiling's share, and what bounds it."""

from __future__ import annotations

import pytest

from chatapp.gguf.header import read_header
from chatapp.models.reply_limits import reply_limits
from chatapp.models.token_cost import model_cost


@pytest.fixture(scope="module")
def cost(model_path):
    return model_cost(read_header(model_path))


def test_decode_gbps_is_bytes_per_token_times_the_rate(cost):
    got = reply_limits(cost, 40, 200, 100.0, 300.0, 30.0, 60.0)
    token = cost.at(40 + 100)
    assert got.bytes_per_token == token.bytes
    assert got.decode_gbps == pytest.approx(token.bytes * 100 / 1e9, rel=1e-3)
    assert got.mem_share == pytest.approx(got.decode_gbps / 30.0, rel=1e-3)
    assert got.prefill_gflops == pytest.approx(cost.at(20).flops * 300 / 1e9, rel=1e-3)


@pytest.mark.parametrize(
    ("decode_tps", "prefill_tps", "mem", "flops", "bound"),
    [
        (250.0, 10.0, 30.0, 1000.0, "memory"),  # 24 GB/s of 30
        (300.0, 10.0, 1000.0, 150.0, "compute"),  # decode ~85 GFLOP/s of 150
        (100.0, 300.0, 100.0, 1000.0, "overhead"),  # ~10% and ~8%
    ],
)
def test_the_bound_is_the_ceiling_at_least_half_used(
    cost, decode_tps, prefill_tps, mem, flops, bound
):
    got = reply_limits(cost, 40, 200, decode_tps, prefill_tps, mem, flops)
    assert got.bound == bound
    assert got.line().startswith(f"decode {got.decode_gbps:.1f} GB/s of {mem:.0f}")
    assert f"{bound}-bound" in got.line()
    assert f"the KV cache {got.kv_share:.0%} of the bytes" in got.line()  # grows with the chat


def test_unmeasured_ceilings_bound_nothing(cost):
    got = reply_limits(cost, 40, 200, 100.0, 300.0, 0.0, 0.0)
    assert got.bound == "overhead" and got.mem_share == 0 and got.compute_share == 0


def test_prefill_sits_right_of_decode_on_the_roofline(cost):
    got = reply_limits(cost, 300, 100, 100.0, 300.0, 30.0, 60.0)
    assert 1 < got.decode_intensity < 10  # ~2 FLOPs a byte: a matrix-vector product
    assert got.prefill_intensity > 100 * got.decode_intensity  # 300 tokens a weight read
    one = reply_limits(cost, 1, 100, 100.0, 300.0, 30.0, 60.0)
    assert one.prefill_intensity == pytest.approx(one.decode_intensity, rel=0.05)


def test_a_reply_with_offloaded_layers_says_how_many_bytes_the_gpu_read(model_path, cost):
    from chatapp.metrics import GenerationStats
    from chatapp.models.reply_limits import limits_of_reply

    stats = GenerationStats(40, 40, 200, 0.1, 0.2, 2.0, 240, 1024)
    peaks = {"mem_read_gbps": 30.0, "compute_gflops": 60.0}
    cpu = limits_of_reply(model_path, stats, peaks)
    gpu = limits_of_reply(model_path, stats, peaks, n_gpu_layers=10)
    assert cpu is not None and gpu is not None and cpu.gpu_bytes_per_token == 0
    assert gpu.gpu_bytes_per_token == cost.on_devices(140, 10)[0] > 0
    assert limits_of_reply(model_path, stats, None) is None  # nothing measured: no limits
