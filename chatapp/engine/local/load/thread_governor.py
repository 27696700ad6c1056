"""The decode thread count, kept right while the machine changes: try one fewer when steps slow
down or another program takes a core, one more when the cores free up; keep what is faster,
judged on steps taken at both counts in turn."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW = 6  # single-token steps timed at one count before its pace is judged
PAIRS = 4  # a probe times this many steps at each of the two counts, taken in turn
SLOWER = 1.25  # a window this much slower than the quiet pace starts a probe downward
SPED_UP = 1.2  # a lowered count's window this much faster than its pace so far: probe one more
FASTER = 0.95  # a probe the reading does not back is kept at this share of the time or less
TIE = 1.05  # a probe the reading backs is kept unless it is this much slower
HOPELESS = 2.0  # a probe's first steps this much slower than the other count's end it at once
HINT_EVERY_S = 0.25  # how often the other programs' CPU use is looked at
BUSY_CORES = 0.5  # other programs using this many cores or more: probe one thread fewer
FREE_CORES = 0.3  # ... this few or fewer while running with fewer threads: probe one more
UP_EVERY_S = 1.0  # with fewer threads than the most, try one more this often at least
BACKOFF_MAX_S = 8.0  # a probe that lost waits longer each time, up to this
STALL = 4.0  # a single step this many times its count's pace is stopped (stall_guard.py) ...
STALL_MIN_S = 0.03  # ... or this long, whichever is longer, and run again one thread fewer
WAKE_STALL_S = 0.25  # the limit of the first step after the count went up (see _waking)


@dataclass(frozen=True)
class Switch:
    """A change of thread count during a reply: at which token, to how many, and why."""

    index: int
    threads: int
    why: str  # "slower", "busy", "stalled", "free", "retry", "start"


@dataclass
class Probe:
    """A trial of another count: single steps alternate between the count before and the
    trial, so both are timed under the same load (a load that comes and goes, as a build's
    compiler processes do, made a window timed before the trial a false baseline)."""

    before: int
    trial: int
    why: str
    backed: bool  # the CPU reading says the trial suits the machine now: a tie keeps it
    pace: float | None = None  # the count before's pace when the probe started, if known
    times: dict[int, list[float]] = field(default_factory=dict)

    def add(self, threads: int, seconds: float) -> None:
        self.times.setdefault(threads, []).append(seconds)

    def verdict(self) -> bool | None:
        """Keep the trial (True), drop it (False), or time more steps (None). One count far
        slower than the other decides at once: beside a build, a step on 2 threads can take
        ten times one on 1, and four of them would cost more than the trial saves."""
        trial, before = self.times.get(self.trial, []), self.times.get(self.before, [])
        if len(trial) == 1 and not before and self.pace is not None:
            if trial[0] > HOPELESS * self.pace:
                return False  # one step far slower than the last window
            if self.backed and trial[0] * HOPELESS < self.pace:
                return True  # far faster, and the reading says why
        if trial and before:
            if len(trial) >= 2 and min(trial) > HOPELESS * max(before):
                return False
            if min(before) > HOPELESS * max(trial):
                return True
        if all(len(t) >= PAIRS for t in (trial, before)):
            return self.kept()
        return None

    def kept(self) -> bool:
        """Whether the trial count is kept: its median step against the count before's."""
        trial = statistics.median(self.times[self.trial])
        before = statistics.median(self.times[self.before])
        return trial <= before * (TIE if self.backed else FASTER)


@dataclass
class ThreadGovernor:
    """Chooses the thread count between two decodes of a reply. `apply(n)` sets it on the live
    context (llama_set_n_threads); `others()` returns the cores other programs use now (None
    where unknown; cpu_load.LoadWatch keeps it fresh across idle gaps). The count starts at
    `most`, the tuned quiet-machine best. During a reply only steps timed at both counts keep
    a change: a reading only starts a probe and breaks a tie. A reply that starts on a busy
    reading asks `others_now()` (the next moment only) whether the load is still there, and
    if so starts one thread short, kept: a step at the full count would cost seconds. A step
    that runs far past its count's pace (stall_limit) is stopped and run again one thread
    fewer (stalled): a program that started in the middle of the step."""

    most: int
    apply: Callable[[int], None]
    apply_batch: Callable[[int], None] = lambda n: None  # the prompt's batches only
    others: Callable[[], float | None] = lambda: None
    others_now: Callable[[], float | None] | None = None  # a fresh short reading, when busy
    clock: Callable[[], float] = time.perf_counter
    threads: int = 0
    switches: list[Switch] = field(default_factory=list)
    probes: int = 0  # trials run, kept or not
    busy_cores: float | None = None  # other programs' cores at the last reading
    _window: list[float] = field(default_factory=list)
    _pace: dict[int, float] = field(default_factory=dict)  # the normal step time per count
    _lately: dict[int, float] = field(default_factory=dict)  # its last window's, per count
    _index: int = 0  # the reply's token the last timed step decoded for
    _untimed: bool = False  # the next step ran after a stop: its time is not a step's
    _waking: bool = False
    """The count just went up: the next step wakes the thread that was idle and is no step's
    pace. On a 2-core VM the first step on 2 threads after steps on 1 took 30-220 ms against
    17-19 ms (the idle vCPU is woken through the host), and a step on 2 threads right after one
    on 1 took 24-78 ms: timed as the count's own, it lost every trial upward, and kept trials
    downward, on a quiet machine (2 threads steady decode ~1.5x faster than 1 there)."""
    _probe: Probe | None = None
    _judged: float | None = None  # the count now's pace when a probe last timed it
    _next_hint: float = 0.0
    _next_down: float = 0.0
    _next_up: float = 0.0
    _wait_down: float = UP_EVERY_S
    _wait_up: float = UP_EVERY_S

    def __post_init__(self) -> None:
        self.threads = self.threads or self.most

    def before_prefill(self) -> None:
        """A reply starts: read the machine now and start from the count it suits. Another
        program busy (still, by a fresh reading): the prompt and the decode run one thread
        short (a 2-core box with one core taken evaluates a prompt ~3-8x faster on 1 thread
        than on 2); the cores free again: back to the most, whatever the last reply ended on."""
        if self._probe is not None:  # a trial left over from the last reply says nothing now
            self._set_quietly(self._probe.before)
            self._probe = None
        self._window.clear()
        self._index, self._untimed, self._waking = 0, False, False
        now = self.clock()
        self.busy_cores = self.others()
        if self._busy() and self.others_now is not None:
            self.busy_cores = self.others_now()  # (still busy, or a program that just ended?)
        self._next_hint = now + HINT_EVERY_S
        if self._busy():
            if self.threads == self.most and self.most > 1:
                # Kept at once, not tried against a step at the count before: beside a program
                # that keeps a core busy, one step on every thread took 1-3.5 s (each of the
                # graph's barriers waits for a thread the other program pushed off its core)
                # against 12 ms on one fewer, and halved a 300-token reply's pace. A reading
                # of free cores later tries the count back up, timed at both counts.
                self._set(self.most - 1, 0, "busy")
        elif self._free() and self.threads < self.most:
            self._set(self.most, 0, "start")

    def after_prefill(self) -> None:
        """Back to the decode count for both single steps and draft batches."""
        self.apply(self.threads)

    def step(self, seconds: float, index: int) -> None:
        """One single-token decode took `seconds`; it was token `index` of the reply."""
        now = self.clock()
        self._index = index
        if now >= self._next_hint:
            self._next_hint = now + HINT_EVERY_S
            self.busy_cores = self.others()
        if self._untimed or self._waking:  # (a stopped step and its rerun, or a wake-up)
            self._untimed = self._waking = False
            return
        if self._probe is not None:
            self._probe_step(seconds, now, index)
            return
        self._window.append(seconds)
        if self._hinted(now, index):
            return
        if len(self._window) < WINDOW:
            return
        pace = statistics.median(self._window)
        self._window.clear()
        self._lately[self.threads] = pace
        normal = self._pace.get(self.threads)
        if normal is None or pace < normal:
            self._pace[self.threads] = pace
        # steps at a lowered count much faster than when a probe last timed it: cores freed?
        sped_up = self._judged is not None and pace * SPED_UP < self._judged
        if normal is not None and pace > normal * SLOWER and self._may_go_down(now):
            self._start(self.threads - 1, index, "slower", self._busy(), pace)
        elif self.threads < self.most and not self._busy() and (sped_up or now >= self._next_up):
            self._start(self.threads + 1, index, "retry", self._free(), pace)

    def stall_limit(self) -> float | None:
        """How long the next single step may run before it is stopped and run again one thread
        fewer (stall_guard.py); None: never stopped (one thread, or no pace known yet at this
        count). The pace is the larger of the count's best and its last window's, so a step
        that slows as the context grows is not taken for a stall."""
        if self.threads <= 1:
            return None
        paces = [p for p in (self._pace.get(self.threads), self._lately.get(self.threads)) if p]
        if not paces:
            return None
        limit = max(STALL * max(paces), STALL_MIN_S)
        return max(limit, WAKE_STALL_S) if self._waking else limit

    def stalled(self) -> None:
        """The step under way ran past stall_limit() and was stopped (another program took a
        core in the middle of it): run it again, and go on, one thread fewer. A trial of one
        thread more that stalls is lost, and the next waits longer; otherwise the change is
        kept and recorded. A reading of free cores later tries the count back up."""
        now = self.clock()
        probe, self._probe = self._probe, None
        kept_at = probe.before if probe is not None else self.threads
        fewer = self.threads - 1
        self._untimed = True
        if fewer >= kept_at:  # a trial upward that stalled
            self._set_quietly(fewer)
            self._next_up = now + self._wait_up
            self._wait_up = min(self._wait_up * 2, BACKOFF_MAX_S)
            return
        self._window.clear()
        self._judged = None
        self._set_quietly(fewer)
        self.switches.append(Switch(self._index + 1, fewer, "stalled"))
        self._wait_down = UP_EVERY_S
        self._next_up = now + UP_EVERY_S

    def _busy(self) -> bool:
        return self.busy_cores is not None and self.busy_cores >= BUSY_CORES

    def _free(self) -> bool:
        return self.busy_cores is not None and self.busy_cores <= FREE_CORES

    def _may_go_down(self, now: float) -> bool:
        return self.threads > 1 and now >= self._next_down

    def _hinted(self, now: float, index: int) -> bool:
        """Start a probe when the other programs' CPU use says the count may be wrong."""
        if self._busy() and self.threads == self.most and self._may_go_down(now):
            self._start(self.threads - 1, index, "busy", backed=True)
            return True
        if self._free() and self.threads < self.most and now >= self._next_up - 0.5:
            self._start(self.threads + 1, index, "free", backed=True)
            return True
        return False

    def _start(
        self, trial: int, index: int, why: str, backed: bool, pace: float | None = None
    ) -> None:
        """Try `trial` threads against the count now; `pace`: the count now's last window."""
        self.probes += 1
        if pace is None and self._window:
            pace = statistics.median(self._window)
        self._probe = Probe(self.threads, trial, why, backed, pace)
        self._window.clear()
        self._set_quietly(trial)

    def _probe_step(self, seconds: float, now: float, index: int) -> None:
        """Time this step for its count, then decode the next at the other count; judge when
        both have their steps."""
        probe = self._probe
        assert probe is not None
        probe.add(self.threads, seconds)
        verdict = probe.verdict()
        if verdict is not None:
            self._judge(probe, verdict, now, index)
        else:
            other = probe.before if self.threads == probe.trial else probe.trial
            self._set_quietly(other)

    def _judge(self, probe: Probe, kept: bool, now: float, index: int) -> None:
        """Keep the trial count, or go on at the count before; a lost probe waits longer
        before the next one the same way."""
        self._probe = None
        went_down = probe.trial < probe.before
        if kept:
            self._set_quietly(probe.trial)
            self.switches.append(Switch(index, probe.trial, probe.why))
            self._pace[probe.trial] = self._judged = statistics.median(probe.times[probe.trial])
            if went_down:
                self._wait_down = UP_EVERY_S
            else:
                self._wait_up = UP_EVERY_S
            self._next_up = now + UP_EVERY_S
            return
        self._set_quietly(probe.before)
        before = probe.times.get(probe.before)
        if before:
            self._pace[probe.before] = self._judged = statistics.median(before)  # its normal now
        elif self._judged is None:
            self._judged = probe.pace
        if went_down:
            self._next_down = now + self._wait_down
            self._wait_down = min(self._wait_down * 2, BACKOFF_MAX_S)
        else:
            self._next_up = now + self._wait_up
            self._wait_up = min(self._wait_up * 2, BACKOFF_MAX_S)

    def _set_quietly(self, threads: int) -> None:
        """Decode at `threads` from the next step, as part of a probe (no switch recorded)."""
        if threads != self.threads:
            self._waking = threads > self.threads
            self.threads = threads
            self.apply(threads)

    def _set(self, threads: int, index: int, why: str) -> None:
        """Decode at `threads` from the next step, a change kept (recorded as a switch)."""
        self._window.clear()
        self._judged = None
        if threads != self.threads:
            self._set_quietly(threads)
            self.switches.append(Switch(index, threads, why))


def thread_stats(governor: ThreadGovernor | None, since: int, threads: int) -> dict:
    """GenerationStats fields of a reply: the count at its end, the quiet count, the changes
    made during it (switches[since:]) and the other programs' cores last seen."""
    if governor is None:
        return {"threads": threads, "threads_most": threads}
    return {
        "threads": governor.threads,
        "threads_most": governor.most,
        "thread_switches": tuple((s.index, s.threads, s.why) for s in governor.switches[since:]),
        "busy_cores": None if governor.busy_cores is None else round(governor.busy_cores, 2),
    }
