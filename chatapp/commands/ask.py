"""`chatapp ask` and `chatapp tokenize`: one reply or one tokenization, streamed to stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from chatapp.chat.attachments import (
    STDIN,
    STDIN_FROM_TERMINAL,
    compose,
    counted,
    fit_problem,
    message_tokens,
    read_attachment,
    reply_budget,
)
from chatapp.chat.session import ChatSession
from chatapp.commands.ask_json import ask_payload
from chatapp.engine.factory import make_engine
from chatapp.engine.protocol import (
    Engine,
    Event,
    Failed,
    Finished,
    Grammar,
    LoadOptions,
    ModelInfo,
    Notice,
    StopReason,
    Token,
)
from chatapp.engine.schema_grammar import load_grammar
from chatapp.engine.steer_library import steering_for
from chatapp.engine.steering import Steering
from chatapp.errors import UsageError
from chatapp.sampling import SamplerSettings
from chatapp.stats_text import (
    decode_text,
    draft_text,
    prefill_text,
    stop_text,
    threads_text,
    tokens_text,
    ttft_text,
)
from chatapp.textsafe import for_stream, one_line

if TYPE_CHECKING:
    from chatapp.engine.local.process.local_engine import LocalEngine


def started_engine(options: LoadOptions, server: str | None = None, **remote) -> Engine:
    """A started engine (local, or a server when `server` is given); its notes on stderr."""
    engine = make_engine(options, server, **remote)
    start_noting(engine)
    return engine


def started_local(options: LoadOptions) -> LocalEngine:
    """A started engine in a child process here, for the views only it has (score, meter)."""
    from chatapp.engine.local.process.local_engine import LocalEngine

    engine = LocalEngine(options)
    start_noting(engine)
    return engine


def start_noting(engine: Engine) -> ModelInfo:
    """Start the engine and say on stderr what it had to do (a GPU step-down, a fallback)."""
    info = engine.start()
    for note in engine.notes:
        print(for_stream(sys.stderr)(f"note: {note}"), file=sys.stderr)
    return info


def run_ask(
    prompt: str,
    options: LoadOptions,
    settings: SamplerSettings,
    *,
    system: str | None,
    stop: list[str],
    as_json: bool,
    top_n: int = 5,
    server: str | None = None,
    remote: dict | None = None,
    think: bool | None = None,
    draft: str = "",
    grammar: Grammar | None = None,
    files: list[str] | tuple[str, ...] = (),
    steer: tuple[list[tuple[str, float]], tuple[int, int]] | None = None,
    raw: bool = False,
) -> int:
    """One reply to stdout (`--json`: one object). `steer`: the vectors and layer range of
    --steer / --steer-layers; `raw`: the prompt as is, without the chat template."""
    if raw and system:
        raise UsageError("--raw sends the prompt as is: it takes no --system")
    if STDIN in files and sys.stdin is not None and sys.stdin.isatty():  # (else: no word)
        print(f"note: {STDIN_FROM_TERMINAL}", file=sys.stderr, flush=True)
    attached = [read_attachment(path) for path in files]  # (a bad file: before the model loads)
    engine = make_engine(options, server, **(remote or {}))
    loaded = start_noting(engine)
    session = _session(settings, system, top_n, grammar, stop, think, draft)
    session.attach(engine, loaded)
    reply = _Reply()
    try:
        if steer is not None:
            session.steering = started_steering(engine, options.model_path, steer)
        if attached:
            attached = counted(engine, attached)
            check_fits(engine, compose(prompt, attached), settings)
        reply.take(session.send(prompt, attached, raw=raw), as_json)
        info = engine.info  # (after the reply: a tune on first use may have changed it)
        limits = engine.capabilities.limits
    finally:
        engine.close()
    if reply.failed is not None:
        return reply.say_failed(as_json)
    assert reply.finished is not None
    if as_json:
        payload = ask_payload(
            reply.finished, reply.tokens, session, info, options, settings, grammar, raw, limits
        )
        json.dump(payload, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        print(stats_line(reply.finished), file=sys.stderr)
    cut = cut_short(reply.finished, grammar)
    if cut:
        print(f"error: {cut}", file=sys.stderr)
        return 1
    return 0


def _session(settings, system, top_n, grammar, stop, think, draft) -> ChatSession:
    """The chat session of one `ask`, as its options set it."""
    session = ChatSession(settings=settings, system_prompt=system or "", top_n=top_n)
    session.grammar = grammar
    session.stop = tuple(stop)
    session.enable_thinking = think
    session.speculation = draft
    return session


class _Reply:
    """One reply's events as they stream: its tokens (each written to stdout as it comes,
    unless --json), its notes (to stderr) and how it ended."""

    def __init__(self) -> None:
        self.tokens: list[Token] = []
        self.finished: Finished | None = None
        self.failed: Failed | None = None

    def take(self, events: Iterable[Event], as_json: bool) -> None:
        out = sys.stdout
        shown, shown_err = for_stream(out), for_stream(sys.stderr)  # a terminal: no raw escapes
        for event in events:
            if isinstance(event, Token):
                self.tokens.append(event)
                if not as_json:
                    out.write(shown(event.text))
                    out.flush()
            elif isinstance(event, Notice):
                print(shown_err(f"note: {event.message}"), file=sys.stderr)
            elif isinstance(event, Finished):
                self.finished = event
            elif isinstance(event, Failed):
                self.failed = event

    def say_failed(self, as_json: bool) -> int:
        """The failure's one line on stderr (after the reply so far ends its line): exit 1."""
        assert self.failed is not None
        if not as_json and self.tokens:
            sys.stdout.write("\n")
        print(for_stream(sys.stderr)(one_line(f"error: {self.failed.message}")), file=sys.stderr)
        return 1


CUT_REMEDY = {
    StopReason.MAX_TOKENS: "raise --max-tokens",
    StopReason.STOP_STRING: "leave out --stop",
    StopReason.CONTEXT_FULL: "raise --ctx or shorten the prompt",
}


def cut_short(finished: Finished, grammar: Grammar | None) -> str:
    """The sentence for a reply under a schema or grammar that stopped before its end (its
    JSON is then incomplete), or ""."""
    if grammar is None or finished.reason == StopReason.EOG:
        return ""
    remedy = CUT_REMEDY.get(finished.reason, "ask again")
    return (
        f"the reply stopped ({finished.reason}) before it was complete, so it does not "
        f"follow {grammar.source}; {remedy}"
    )


def started_steering(engine: Engine, model_path: str, steer) -> Steering:
    """The Steering of --steer on the started engine's model (a built-in pair not made for it
    yet is made now and kept); what had to be done goes to stderr."""
    notes: list[str] = []
    steering = steering_for(steer[0], model_path, steer[1], engine=engine, notes=notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return steering


def check_fits(engine: Engine, content: str, settings: SamplerSettings) -> None:
    """UsageError with the numbers when the message cannot fit even alone with its reply."""
    n_ctx = engine.info.n_ctx if engine.info else 0
    tokens = message_tokens(engine, content)
    if n_ctx and tokens is not None:
        problem = fit_problem(tokens, n_ctx, reply_budget(settings.max_tokens, n_ctx))
        if problem:
            raise UsageError(problem)


def grammar_option(json_schema: str | None, gbnf: str | None) -> Grammar | None:
    """The grammar `--json-schema FILE` or `--grammar FILE.gbnf` asks for (one of them)."""
    for flag, value in (("--json-schema", json_schema), ("--grammar", gbnf)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} is empty: give a file, or leave the option out")
    if json_schema and gbnf:
        raise UsageError("give --json-schema or --grammar, not both")
    if json_schema:
        return load_grammar(json_schema, "schema")
    if gbnf:
        return load_grammar(gbnf, "gbnf")
    return None


def stats_line(finished: Finished) -> str:
    """The line `chatapp ask` writes to stderr after a reply (every field, n/a if unmeasured)."""
    st = finished.stats
    return (
        f"TTFT {ttft_text(st.ttft_s)} | prefill {prefill_text(st.prefill_tps)} "
        f"({st.prompt_evaluated} tok) | decode {decode_text(st.decode_tps)} | "
        f"{tokens_text(st.completion_tokens)} | {stop_text(finished.reason)}"
        + (f" | {draft_text(st)}" if st.draft else "")
        + (f" | threads {threads_text(st)}" if st.thread_switches else "")
    )


def run_tokenize(text: str, options: LoadOptions, as_json: bool, special: bool) -> int:
    engine = started_engine(options)
    try:
        pieces = engine.tokenize(text, special=special)
    finally:
        engine.close()
    if as_json:
        json.dump(
            [{"id": p.id, "piece": p.text, "bytes": list(p.piece)} for p in pieces],
            sys.stdout,
            ensure_ascii=False,
        )
        sys.stdout.write("\n")
    else:
        for p in pieces:
            print(f"{p.id:>7}  {p.piece!r}")
        print(f"{len(pieces)} tokens", file=sys.stderr)
    return 0
