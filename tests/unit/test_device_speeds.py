"""Decode ceilings on common devices: bandwidth over a token's bytes, and whether it fits."""

from __future__ import annotations

import pytest

from chatapp.gguf.header import read_header
from chatapp.models.device_speeds import DEVICES, device_rows, format_device_rows
from chatapp.models.token_cost import model_cost


def test_each_device_ceiling_is_its_bandwidth_over_the_bytes_per_token(model_path):
    token = model_cost(read_header(model_path)).at(1000)
    rows = device_rows(token, total_bytes=200 * 1024**2, here_gbps=30.0)
    assert rows[0].device == "this machine (measured)"
    assert rows[0].decode_ceiling_tps == pytest.approx(30e9 / token.bytes)
    for row, device in zip(rows[1:], DEVICES, strict=True):
        assert row.decode_ceiling_tps == pytest.approx(device.bandwidth_gbps * 1e9 / token.bytes)
        assert row.fits
    ceilings = [r.decode_ceiling_tps for r in rows[1:]]
    assert ceilings == sorted(ceilings)  # the table goes from a laptop to a data centre
    text = format_device_rows(rows)
    assert "H100" in text and "this machine" in text


def test_a_model_larger_than_a_device_does_not_fit_there(model_path):
    token = model_cost(read_header(model_path)).at(0)
    rows = device_rows(token, total_bytes=int(30e9), here_gbps=None)
    assert [r.fits for r in rows] == [False, True, False, True]  # 16, 64, 24, 80 GB
