"""The thread governor on a simulated 2-core machine: another program taking a core drops the
count to 1 within about a second, the count comes back when the core frees, a quiet machine
keeps its count, and a hint alone never keeps a change that measures slower."""

from __future__ import annotations

import random

import pytest

from chatapp.engine.local.load.thread_governor import WAKE_STALL_S, ThreadGovernor, thread_stats

# seconds per token on a 2-core box (the bundled model, ~measured): quiet and one core busy
PACE = {(2, False): 0.008, (1, False): 0.014, (2, True): 0.100, (1, True): 0.022}


class Machine:
    """Step times by thread count and load, with noise; the clock moves as steps are taken."""

    def __init__(self, seed: int = 0, hint: bool = False, wake_s: float = 0.0) -> None:
        self.now = 0.0
        self.wake_s = wake_s  # what a step costs more right after one on fewer threads
        self.last = 2
        self.busy = False
        self.hint = hint
        self.rng = random.Random(seed)
        self.gov = ThreadGovernor(2, self.apply, others=self.others, clock=lambda: self.now)
        self.applied: list[int] = []

    def apply(self, n: int) -> None:
        self.applied.append(n)

    def others(self) -> float | None:
        if not self.hint:
            return None
        return 1.0 if self.busy else 0.05

    def run(self, seconds: float, index: int = 0) -> int:
        end = self.now + seconds
        while self.now < end:
            dt = PACE[(self.gov.threads, self.busy)] * self.rng.uniform(0.9, 1.15)
            if self.gov.threads > self.last:
                dt += self.wake_s * self.rng.uniform(0.5, 1.5)
            self.last = self.gov.threads
            self.now += dt
            self.gov.step(dt, index)
            index += 1
        return index


def _timeline(m: Machine, seconds: float, step_s: float = 0.05) -> list[tuple[float, int]]:
    out = []
    index = 0
    end = m.now + seconds
    while m.now < end:
        index = m.run(step_s, index)
        out.append((m.now, m.gov.threads))
    return out


def _free_brings_two_back(m: Machine) -> None:
    """The load ends: two threads come back within 1.6 s (simulated) and stay."""
    m.busy = False
    t_free = m.now
    free = _timeline(m, 4.0)
    up = next(t for t, n in free if n == 2)
    assert up - t_free <= 1.6
    assert all(n == 2 for _, n in free[-20:])


@pytest.mark.parametrize("hint", [False, True], ids=["steps-only", "with-cpu-hint"])
@pytest.mark.parametrize("seed", range(5))
def test_a_busy_core_drops_to_one_thread_and_a_free_one_brings_two_back(seed, hint):
    m = Machine(seed, hint)
    quiet = _timeline(m, 3.0)
    assert all(n == 2 for _, n in quiet[-20:])  # quiet: stays at the tuned count
    m.busy = True
    t_load = m.now
    busy = _timeline(m, 4.0)
    down = next(t for t, n in busy if n == 1)
    assert down - t_load <= 1.0  # the "within ~1 s" on the simulated clock
    assert sum(n == 1 for _, n in busy[-40:]) >= 36  # and it stays there (probes up are short)
    _free_brings_two_back(m)


@pytest.mark.parametrize("seed", range(5))
def test_a_step_that_wakes_a_thread_is_not_the_counts_pace(seed):
    """On a VM the first step after the count goes up wakes an idle vCPU through the host
    (measured on a 2-core EPYC: 30-220 ms against 17-19 ms a step): a trial of two threads
    timed on that step lost every time, and the count stayed at 1 on a free machine."""
    m = Machine(seed, hint=True, wake_s=0.06)
    m.run(3.0)
    m.busy = True
    m.run(4.0)
    assert m.gov.threads == 1
    _free_brings_two_back(m)
    assert m.gov.switches[-1].why in ("free", "retry")


@pytest.mark.parametrize("seed", range(5))
def test_a_quiet_machine_keeps_its_count(seed):
    m = Machine(seed)
    m.run(10.0)
    assert m.gov.threads == 2
    assert len(m.gov.switches) <= 2  # at most a probe that measured slower and went back


def test_a_hint_that_measures_slower_is_undone():
    """Another program 'busy' per the CPU reading, but one thread is slower: two is kept."""
    m = Machine(0, hint=True)
    m.others = lambda: 1.0  # the reading says busy; the steps say quiet
    m.gov.others = m.others
    m.run(5.0)
    assert m.gov.threads == 2
    assert m.gov.switches == []  # every trial of one thread lost: nothing changed
    assert 1 <= m.gov.probes <= 4  # backs off: 1, 2, 4 s between tries


class Build(Machine):
    """A build beside the reply: compiler processes on every core, with short gaps between
    them that a reading may fall into (the load the bench's spinner never made)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, hint=True)
        self.busy = True

    def run(self, seconds: float, index: int = 0) -> int:
        end = self.now + seconds
        while self.now < end:
            self.busy = (self.now % 0.7) > 0.08  # a 80 ms gap every 0.7 s
            dt = PACE[(self.gov.threads, self.busy)] * self.rng.uniform(0.7, 1.6)
            self.now += dt
            self.gov.step(dt, index)
            index += 1
        return index

    def others(self) -> float | None:
        """What psutil's reading of the last quarter second says: the gaps' share of it."""
        start = self.now - 0.25
        k = int(start // 0.7)
        gap = sum(max(0.0, min(self.now, g * 0.7 + 0.08) - max(start, g * 0.7)) for g in (k, k + 1))
        return 0.1 + 1.8 * (1 - gap / 0.25)


@pytest.mark.parametrize("seed", range(8))
def test_beside_a_build_the_count_stays_down_though_readings_fall_in_gaps(seed):
    """Trials judged on steps at both counts in turn: a gap's fast steps no longer make a
    false baseline that sends the count back up for seconds."""
    m = Build(seed)
    m.gov.before_prefill()
    steps: list[int] = []
    index = 0
    end = m.now + 10.0
    while m.now < end:
        index = m.run(0.01, index)
        steps.append(m.gov.threads)
    assert sum(n == 1 for n in steps) >= 0.9 * len(steps)


def test_a_reply_starts_from_what_the_machine_is_now():
    """The count a busy spell lowered does not carry into the next reply once the cores are
    free; a busy machine at the start puts the prompt and the first steps one thread short."""
    batches: list[int] = []
    applied: list[int] = []
    reading = [1.5]
    gov = ThreadGovernor(2, applied.append, batches.append, others=lambda: reading[0])
    gov.before_prefill()
    assert applied == [1]  # both counts: prefill and decode start at one, on trial
    gov.threads = 1  # as if the trial had been kept
    gov._probe = None
    reading[0] = 0.05
    gov.before_prefill()
    assert gov.threads == 2 and applied[-1] == 2
    assert gov.switches[-1].why == "start"


def test_the_prefill_runs_one_thread_short_while_another_program_is_busy():
    counts: list[int] = []
    gov = ThreadGovernor(2, counts.append, others=lambda: 1.2)
    gov.before_prefill()
    assert counts == [1] and gov.threads == 1
    quiet = ThreadGovernor(2, counts.append, others=lambda: 0.1)
    quiet.before_prefill()
    assert counts == [1] and quiet.threads == 2


def test_a_busy_reading_of_a_program_that_just_ended_does_not_slow_the_prompt():
    """The last reading covers the quarter second before the reply: a benchmark's last run, a
    build step that just ended. A fresh reading says whether the load is still there; the
    prompt of a machine free again runs on every thread (on one it took twice as long)."""
    counts: list[int] = []
    ended = ThreadGovernor(2, counts.append, others=lambda: 1.0, others_now=lambda: 0.02)
    ended.before_prefill()
    assert counts == [] and ended.threads == 2 and ended._probe is None
    still = ThreadGovernor(2, counts.append, others=lambda: 1.0, others_now=lambda: 0.9)
    still.before_prefill()
    assert counts == [1] and still.threads == 1
    asked: list[int] = []
    quiet = ThreadGovernor(2, counts.append, others=lambda: 0.1, others_now=lambda: asked.append(1))
    quiet.before_prefill()
    assert asked == []  # a quiet reading costs the reply no wait


def test_a_reply_that_starts_busy_takes_no_step_on_every_thread():
    """Beside a program that keeps a core busy, one decode on both threads took 1-3.5 s (the
    graph's barriers wait for a thread pushed off its core) against 12 ms on one: a busy
    start no longer times a step at the count before to compare."""
    now = [0.0]
    counts: list[int] = []
    gov = ThreadGovernor(
        2, counts.append, others=lambda: 1.0, others_now=lambda: 1.0, clock=lambda: now[0]
    )
    gov.before_prefill()
    gov.after_prefill()
    for index in range(1, 200):  # 2.4 s of a reply, the other program busy throughout
        now[0] += 0.012
        gov.step(0.012, index)
    assert set(counts) == {1}
    assert [(s.index, s.threads, s.why) for s in gov.switches] == [(0, 1, "busy")]


def test_the_load_watch_reads_the_moment_after_a_program_ends():
    """`fresh()` ends the interval under way unread and reads only the span after it: a
    program that used a core before the call counts for nothing."""
    from chatapp.cpu_load import LoadWatch

    watch = LoadWatch(every_s=10.0)  # (no background reading in between)
    readings = iter([1.0, 0.03])  # the interval under way (a spinner that ended), then now
    watch._reader = lambda: next(readings)
    try:
        assert watch.fresh(0.01) == 0.03
        assert watch() == 0.03  # the latest reading is the fresh one
    finally:
        watch.close()


def test_thread_stats_of_a_reply():
    m = Machine(1)
    m.run(1.0)
    since = len(m.gov.switches)
    m.busy = True
    m.run(2.0, index=100)
    stats = thread_stats(m.gov, since, 2)
    assert stats["threads"] == 1 and stats["threads_most"] == 2
    assert stats["thread_switches"][0][1] == 1 and stats["thread_switches"][0][0] >= 100
    assert thread_stats(None, 0, 3) == {"threads": 3, "threads_most": 3}


def test_disturbed_means_other_programs_took_cores_the_threads_needed():
    from chatapp.cpu_load import disturbed

    assert disturbed(1.0, threads=2, cores=2)  # a spinner on a 2-core box, 2 threads
    assert not disturbed(0.1, threads=2, cores=2)  # a daemon's blip
    assert not disturbed(1.0, threads=8, cores=64)  # the spinner had cores of its own
    assert disturbed(57.0, threads=8, cores=64)
    assert not disturbed(None, threads=2, cores=2)


def test_bench_says_which_repetitions_ran_beside_a_busy_program():
    from chatapp.commands.bench.speed import Run, format_report, summarize
    from chatapp.engine.protocol import LoadOptions

    runs = {
        "engine": [Run(100, 50, 64)] * 3,
        "llama-cpp-python": [Run(99, 49, 64)] * 3,
        "bare decode": [Run(110, 52, 64)] * 3,
    }
    report = summarize(runs, LoadOptions(model_path="m.gguf", n_threads=2), 64, 256, 3)
    report["busy_cores"] = [0.02, 1.01, 0.03]
    report["disturbed_reps"] = [2]
    text = format_report(report)
    assert "! repetition 2 ran while other programs used up to 1.0 cores" in text
    report["disturbed_reps"] = []
    assert "!" not in format_report(report)


@pytest.mark.slow
def test_a_reply_says_its_threads_and_a_pinned_count_never_moves(model_path):
    from chatapp.engine.factory import make_engine
    from chatapp.engine.protocol import ChatMessage, Finished, GenerateRequest, LoadOptions
    from chatapp.sampling import SamplerSettings

    request = GenerateRequest(
        messages=(ChatMessage("user", "Count to twenty."),),
        settings=SamplerSettings(temperature=0.0, max_tokens=24),
    )
    for threads, adapt in ((None, True), (2, False)):
        options = LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0, n_threads=threads)
        with make_engine(options) as engine:
            end = next(e for e in engine.generate(request) if isinstance(e, Finished))
        st = end.stats
        assert st.threads >= 1 and st.threads_most >= st.threads
        if not adapt:
            assert st.thread_switches == () and st.threads == 2 == st.threads_most


def test_the_speed_panel_and_ask_say_when_another_program_took_a_core():
    from chatapp.metrics import GenerationStats
    from chatapp.stats_text import threads_text

    busy = GenerationStats(threads=1, threads_most=2, thread_switches=((3, 1, "busy"),))
    assert threads_text(busy) == "1 of 2: another program is busy"
    back = GenerationStats(
        threads=2, threads_most=2, thread_switches=((3, 1, "busy"), (90, 2, "free"))
    )
    assert threads_text(back) == "2 of 2 (changed 2 times)"
    assert threads_text(GenerationStats(threads=2, threads_most=2)) == "2"
    assert threads_text(GenerationStats()) == ""  # a server: nothing known


def test_the_speed_panels_threads_line_shows_the_live_count():
    from chatapp.engine.protocol import ModelInfo
    from chatapp.ui.widgets.stats import run_settings

    info = ModelInfo(
        path="m.gguf", n_vocab=10, n_ctx=64, n_ctx_train=64, load_s=0.1,
        gpu_offload_supported=False, n_gpu_layers=0, n_layers=2, n_threads=2,
        has_chat_template=True, repack=False,
    )  # fmt: skip
    assert run_settings(info).startswith("2 · fa off")
    assert run_settings(info, "1 of 2: another program is busy").startswith(
        "1 of 2: another program is busy · fa off"
    )


def test_a_reading_over_a_long_idle_gap_says_nothing():
    """Between two replies another program may have run and stopped: a reading that spans the
    gap is no hint for the prompt about to be evaluated (bench --busy's quiet runs went one
    thread short after the pinned engine's turn)."""
    import time

    from chatapp.cpu_load import OtherPrograms

    reader = OtherPrograms(children=False, max_age_s=0.05)
    time.sleep(0.1)
    assert reader() is None
    assert reader() is not None  # the next, close to it, reads


def test_the_load_watch_has_a_fresh_reading_after_an_idle_gap():
    """The worker's reader runs on its own thread: after a gap with no reply, a reply still
    starts with a reading of the last quarter second (the governor went blind there)."""
    import time

    from chatapp.cpu_load import LoadWatch

    watch = LoadWatch(every_s=0.05)
    try:
        assert watch() is not None  # asked at once (a reply right after the load): read now
        time.sleep(0.5)  # a gap far longer than a reading's interval
        assert watch() is not None
    finally:
        watch.close()


def test_bench_busy_turns_the_arms_order_every_round_and_compares_round_by_round():
    """`bench --busy` runs the following engine, the pinned one and llama-bench at each count
    once a round, the order turning, and its ratios are medians of each round's own."""
    from chatapp.commands.bench.busy import ArmRun, _row
    from chatapp.commands.bench.busy_text import row_lines
    from chatapp.commands.bench.run import Run, interleaved

    calls: list[tuple[str, int]] = []

    def arm(name: str, speeds: list[float]):
        def run(rep: int) -> ArmRun:
            calls.append((name, rep))
            return ArmRun(
                Run(speeds[rep] * 2, speeds[rep], 8), ((rep, 1, "slower"),) if rep else ()
            )

        return run

    arms = {
        "following": arm("following", [60.0, 90.0, 30.0]),
        "pinned": arm("pinned", [30.0, 90.0, 60.0]),
        "llama-bench -t 1": arm("lb1", [60.0, 45.0, 30.0]),
        "llama-bench -t 2": arm("lb2", [30.0, 90.0, 15.0]),
    }
    runs = interleaved(arms, 3)
    assert [name for name, _ in calls[:4]] == ["following", "pinned", "lb1", "lb2"]
    assert [name for name, _ in calls[4:8]] == ["pinned", "lb1", "lb2", "following"]
    assert [name for name, _ in calls[8:]] == ["lb1", "lb2", "following", "pinned"]
    assert all(len(r) == 3 for r in runs.values())
    lines = row_lines(_row("1 of 2 cores busy", runs, 2))
    assert lines[0] == "1 of 2 cores busy: engine decode 60.0 t/s, prefill 120.0 t/s (2 switches)"
    assert "following / pinned: decode 1.000x" in lines[1]  # 2.0, 1.0, 0.5 round by round
    # the best fixed count of each round (60, 90, 30) against that round's engine: 1.0 each,
    # where the best count's median (45) would have given 60 / 45
    assert lines[-1].startswith("  engine / best fixed (per round): decode 1.000x")


def _settled(gov: ThreadGovernor, now: list[float], step_s: float, steps: int = 12) -> int:
    """`steps` quiet single steps of `step_s` each (a pace known at the count); the next index."""
    gov.before_prefill()
    gov.after_prefill()
    for index in range(1, steps + 1):
        now[0] += step_s
        gov.step(step_s, index)
    return steps + 1


def test_a_step_is_stopped_only_once_its_count_has_a_pace():
    now = [0.0]
    gov = ThreadGovernor(2, lambda n: None, others=lambda: 0.0, clock=lambda: now[0])
    gov.before_prefill()
    assert gov.stall_limit() is None  # no step timed yet: nothing to judge a stall by
    _settled(gov, now, 0.010)
    assert gov.stall_limit() == pytest.approx(0.04)  # four times the pace
    quick = ThreadGovernor(2, lambda n: None, others=lambda: 0.0, clock=lambda: now[0])
    _settled(quick, now, 0.001)
    assert quick.stall_limit() == 0.03  # never shorter than a few scheduler slices
    one = ThreadGovernor(1, lambda n: None, clock=lambda: now[0])
    _settled(one, now, 0.010)
    assert one.stall_limit() is None  # one thread has nothing to wait for


def test_a_step_that_slows_as_the_context_grows_is_not_a_stall():
    """The limit follows the count's last window, not only its best: deep in a long context a
    step takes several times what it took at the start."""
    now = [0.0]
    gov = ThreadGovernor(2, lambda n: None, others=lambda: 0.0, clock=lambda: now[0])
    index = _settled(gov, now, 0.010)
    for i in range(index, index + 40):
        now[0] += 0.030
        gov.step(0.030, i)
    assert gov.stall_limit() == pytest.approx(0.12)


def test_a_stalled_step_goes_one_thread_short_at_once_and_is_recorded():
    """Another program takes a core mid-reply: the stopped step is decoded again on one
    thread and the reply stays there (recorded: token, count, 'stalled'); the rerun's time is
    no step's pace; a reading of free cores later brings the count back, timed at both."""
    now = [0.0]
    counts: list[int] = []
    load = [0.0]
    gov = ThreadGovernor(2, counts.append, others=lambda: load[0], clock=lambda: now[0])
    index = _settled(gov, now, 0.010)
    load[0] = 1.0
    now[0] += 0.05
    gov.stalled()
    assert gov.threads == 1 and counts[-1] == 1
    applied = len(counts)
    assert [(s.index, s.threads, s.why) for s in gov.switches] == [(index, 1, "stalled")]
    assert gov.stall_limit() is None
    gov.step(0.06, index)  # the stopped step and its rerun: not one step's time
    assert gov._window == []
    for i in range(index + 1, index + 100):  # still busy: it stays on one thread
        now[0] += 0.012
        gov.step(0.012, i)
    assert set(counts[applied - 1 :]) == {1}
    load[0] = 0.0  # the program ended: a trial brings two threads back
    i = index + 100
    while gov.threads == 1 and i < index + 400:
        now[0] += 0.012 if gov.threads == 1 else 0.010
        gov.step(0.012 if gov.threads == 1 else 0.010, i)
        i += 1
    for j in range(i, i + 20):  # (the trial's steps at two threads each follow a wake-up)
        now[0] += 0.010 if gov.threads == 2 else 0.012
        gov.step(0.010 if gov.threads == 2 else 0.012, j)
    assert gov.threads == 2
    assert gov.switches[-1].why in ("free", "retry")


def test_a_trial_of_one_more_thread_that_stalls_is_lost_and_waits_longer():
    now = [0.0]
    gov = ThreadGovernor(
        2, lambda n: None, others=lambda: 1.0, others_now=lambda: 1.0, clock=lambda: now[0]
    )
    gov._pace[2] = 0.010  # a pace at two threads from an earlier reply
    gov.before_prefill()  # busy: one thread short from the start
    gov.after_prefill()
    gov._start(2, 5, "retry", backed=False, pace=0.012)  # a trial of two threads
    assert gov.threads == 2 and gov.stall_limit() == WAKE_STALL_S  # its first step wakes one
    now[0] += 0.05
    gov.step(0.05, 6)  # that wake-up is no step of the trial's
    assert gov._probe is not None and gov._probe.times == {}
    assert gov.stall_limit() == pytest.approx(0.04)
    wait = gov._wait_up
    gov.stalled()
    assert gov.threads == 1 and gov._probe is None
    assert [s.why for s in gov.switches] == ["busy"]  # the lost trial is no change
    assert gov._wait_up == 2 * wait
