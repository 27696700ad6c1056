"""The machine's ceilings: measured, labelled with how, and sized to the free memory."""

from __future__ import annotations

from chatapp import ceilings


def test_the_read_buffer_follows_the_free_memory():
    assert ceilings.buffer_mib(None) == ceilings.READ_BUFFER_MIB
    assert ceilings.buffer_mib(64 * 1024**3) == ceilings.READ_BUFFER_MIB
    assert ceilings.buffer_mib(1024**3) == 128  # an eighth of 1 GiB
    assert ceilings.buffer_mib(100 * 1024**2) == 64  # never below 64 MiB


def test_measure_gives_both_ceilings_and_says_how(monkeypatch):
    monkeypatch.setattr(ceilings, "READ_BUFFER_MIB", 64)  # (quicker; the same code)
    found = ceilings.measure(threads=2)
    assert found.mem_read_gbps > 0 and found.compute_gflops > 0
    assert found.threads == 2 and "2 threads" in found.read_method
    assert "numpy's BLAS" in found.compute_method
    assert set(found.to_dict()) >= {"mem_read_gbps", "compute_gflops", "measured_at"}


def _measured(gbps: float, gflops: float, when: str) -> ceilings.Ceilings:
    return ceilings.Ceilings(gbps, gflops, 2, "read", "blas", when, 1.0)


def test_a_ceiling_is_kept_at_the_best_measured():
    first = ceilings.best_of(None, _measured(30.0, 60.0, "d1"))
    busy = ceilings.best_of(first, _measured(8.0, 70.0, "d2"))
    assert (busy["mem_read_gbps"], busy["compute_gflops"], busy["measured_at"]) == (
        30.0,
        70.0,
        "d2",
    )
    assert (
        ceilings.best_of({"mem_read_gbps": "x"}, _measured(5.0, 6.0, "d3"))["mem_read_gbps"] == 5.0
    )
