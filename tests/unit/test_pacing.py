"""Frame pacing while a CPU-bound reply streams: the UI keeps to a share of one core."""

from __future__ import annotations

import pytest

from chatapp.ui.pacing import SETTLE_FRAMES, FramePacer
from chatapp.ui.streaming import LIGHT, SMOOTH, Cadence


class FakeCpu:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _frames(pacer: FramePacer, cpu: FakeCpu, cost: float, n: int) -> None:
    for _ in range(n):
        cpu.t += cost
        pacer.framed()


def test_frames_are_spaced_so_the_ui_keeps_to_its_budget():
    cpu = FakeCpu()
    pacer = FramePacer(Cadence(text_s=0.1, panels_s=1.0, budget=0.02, ceiling_s=1.0), cpu=cpu)
    pacer.start()
    _frames(pacer, cpu, 0.010, SETTLE_FRAMES)  # the first frames also mount widgets: ignored
    assert pacer.text_s == 0.1 and pacer.frame_cpu_s is None
    _frames(pacer, cpu, 0.010, 30)
    assert pacer.text_s == pytest.approx(0.010 / 0.02, rel=0.01)  # 10 ms a frame: 2 a second
    assert pacer.cpu_share == pytest.approx(0.02, rel=0.01)
    assert pacer.panels_s == pytest.approx(4 * pacer.text_s)  # panels a few frames apart


def test_the_interval_stays_between_the_cadence_floor_and_its_ceiling():
    cpu = FakeCpu()
    pacer = FramePacer(LIGHT, cpu=cpu)
    pacer.start()
    _frames(pacer, cpu, 0.0001, 40)  # cheap frames: never faster than the cadence's own
    assert pacer.text_s == LIGHT.text_s
    _frames(pacer, cpu, 0.5, 40)  # a slow machine: at most LIGHT.ceiling_s between frames
    assert pacer.text_s == LIGHT.ceiling_s


def test_a_cadence_without_a_budget_keeps_its_interval_and_a_new_model_starts_over():
    cpu = FakeCpu()
    pacer = FramePacer(SMOOTH, cpu=cpu)
    pacer.start()
    _frames(pacer, cpu, 0.05, 20)
    assert pacer.text_s == SMOOTH.text_s and pacer.cpu_share is None
    pacer.use(LIGHT)
    pacer.start()
    _frames(pacer, cpu, 0.01, 20)
    assert pacer.text_s > LIGHT.text_s
    pacer.use(SMOOTH)
    assert pacer.text_s == SMOOTH.text_s and pacer.frame_cpu_s is None
