"""The child process: owns the Llama, runs the token loop, answers the parent over pipes."""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from chatapp.engine.local.load.worker_log import WorkerLog, load_error_from_log
from chatapp.engine.local.loop import perplexity_scoring
from chatapp.engine.local.loop.parallel import ParallelGeneration
from chatapp.engine.local.loop.serving_model import ServingModel
from chatapp.engine.local.loop.token_loop import Generation
from chatapp.engine.local.pipe_messages import (
    Close,
    Command,
    Events,
    Generate,
    Loaded,
    LoadFailed,
    Perplexity,
    PerplexityDone,
    PerplexityProgress,
    Reply,
    Request,
    Score,
    Scored,
    StartAutotune,
    WarmingUp,
)
from chatapp.engine.local.process import side_pipe
from chatapp.engine.local.process.tune_turns import TuneTurns
from chatapp.engine.protocol import Failed, GenerateRequest, LoadOptions

if TYPE_CHECKING:
    from ctypes import Array, c_byte


def main(
    conn: Connection,
    side: Connection,
    options: LoadOptions,
    log_path: str,
    nice: int = 0,
    tuning: c_byte | None = None,
    stop: Array[c_byte] | None = None,
) -> None:
    """Entry point of the worker process. `tuning` and `stop` (shared with the parent): the
    tune on first use's step in progress, and the parent's word that a request came
    (tune_turns.py)."""
    redirect_output(log_path)
    if nice > 0:
        _lower_priority(nice)
    log = WorkerLog(log_path)
    log.mark()
    try:
        worker = ServingModel(options)
    except Exception as exc:  # every load failure becomes one message
        reason = _load_error(options.model_path, exc, log.text())
        conn.send(LoadFailed(reason))
        return
    conn.send(WarmingUp())  # a crash from here on is the backend's first compute
    code = worker.warm_up()
    if code != 0:
        conn.send(
            LoadFailed(
                f"could not load {options.model_path}: llama.cpp's "
                f"first decode failed (code {code})"
            )
        )
        return
    if options.draft_model:
        try:
            problem = worker.load_draft(options.draft_model)
        except Exception as exc:
            problem = _load_error(options.draft_model, exc, log.text())
        if problem:
            conn.send(LoadFailed(problem))
            return
    conn.send(Loaded(worker.described(log.text())))
    side_pipe.start(worker, side)
    serve(worker, conn, TuneTurns(worker, tuning, stop))


def _lower_priority(nice: int) -> None:
    """Yield the CPU to the UI process first: its frames then never wait behind llama.cpp's
    threads (created after this, so they inherit it). Best effort: some systems refuse."""
    try:
        os.nice(nice)
        target = os.getpriority(os.PRIO_PROCESS, 0)
        # Linux: nice is per thread, and numpy's BLAS pool started before this one. /proc, not
        # psutil's threads(): elsewhere those ids are no pids setpriority may be given.
        tids = os.listdir("/proc/self/task")
    except (OSError, AttributeError):
        return
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), target)
        except OSError:
            pass


def redirect_output(log_path: str) -> None:
    """llama.cpp logs to fds 1/2: send both to the log file so they never reach a terminal."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _load_error(path: str, exc: Exception, log_text: str = "") -> str:
    """One sentence: llama.cpp's own reason from the log, not its generic exception text."""
    reason = str(exc).strip() or type(exc).__name__
    if "Failed to load model from file" in reason:
        found = load_error_from_log(log_text)
        if found:
            reason = f"llama.cpp says: {found}"
        else:
            reason = "llama.cpp could not load it (see the log for details)"
    return f"could not load {path}: {reason}"


def serve(worker: ServingModel, conn: Connection, turns: TuneTurns | None = None) -> None:
    """The main pipe: replies and scoring, one at a time, until Close or the pipe ends.
    While nothing is asked, a tune on first use (autotune) goes on a step at a time."""
    turns = turns or TuneTurns(worker, None)
    while True:
        try:
            if turns.wants_a_step(conn):
                turns.step()
                continue
            msg: Command = conn.recv()
        except (EOFError, OSError):
            return
        match msg:
            case Close():
                return
            case StartAutotune(plan):
                turns.begin(plan)
            case Generate() | Score() | Perplexity():
                answer(worker, conn, msg, turns)
            # Cancel, NewSettings and NewSteering that arrive between replies are stale


def answer(worker: ServingModel, conn: Connection, msg: Request, turns: TuneTurns) -> None:
    """One request: a reply, a scoring or a perplexity (with the request's steering only)."""
    problem = worker.steering.begin(msg.request.steering if isinstance(msg, Generate) else None)
    if problem:
        conn.send(refused(msg, problem))
        return
    match msg:
        case Score(tokens):
            turns.serve("score", lambda: conn.send(Scored(worker.score(tokens))))
        case Perplexity(job):
            report = lambda done, total, s: conn.send(PerplexityProgress(done, total, s))  # noqa: E731
            turns.serve(
                "perplexity",
                lambda: conn.send(PerplexityDone(perplexity_scoring.run(worker, job, report))),
            )
        case Generate(request, sent_at):
            generate(worker, conn, request, sent_at, turns)


def refused(msg: Request, problem: str) -> Reply:
    """The answer to a request that could not begin, of the type its asker waits for."""
    match msg:
        case Score():
            return Scored(problem)
        case Perplexity():
            return PerplexityDone(problem)
    return Events([Failed(problem)])


def generate(
    worker: ServingModel,
    conn: Connection,
    request: GenerateRequest,
    sent_at: float,
    turns: TuneTurns,
) -> None:
    """One reply (several decoded together for alternatives); a tune asked for meanwhile
    begins after it."""
    job = (ParallelGeneration if request.n_alternatives > 1 else Generation)(worker, conn, request)
    if turns.on:  # sent while the tune was on, it waited behind the tune's step
        job.tune_wait_since = sent_at
    turns.serve("generate", job.run)
    if job.tune_asked is not None:  # the tune was asked for while the reply ran
        turns.begin(job.tune_asked)
