"""The `chatapp` command line (typer); the UI and llama.cpp are imported only inside commands."""

from __future__ import annotations

import signal
import sys

import typer

from chatapp.cli import (  # noqa: F401  (each module registers its commands on `app`)
    chat_commands,
    history_commands,
    hub_commands,
    inside_commands,
    lesson_commands,
    machine_commands,
    model_commands,
    speed_commands,
    steer_commands,
)
from chatapp.cli.typer_app import app
from chatapp.errors import ChatappError, UsageError
from chatapp.textsafe import for_stream, one_line

__all__ = ["app", "main"]

try:  # typer >= 0.20 vendors click as typer._click and raises its exceptions
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # older typer raises click's own (NoArgsIsHelpError: click >= 8.2)
    # (the same classes in click's own module: mypy checks against the vendoring typer)
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[assignment]

# typer.Abort (Ctrl-C at a prompt) is typer's own class since typer vendors click, click's
# re-exported before; typer.TyperException is the base of the vendored click exceptions (older
# typer, down to the 0.12 floor, has none: click's ClickException is the base there).
_CLI_ERRORS = (getattr(typer, "TyperException", ClickException), ClickException)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user error is one `error:` line and a non-zero exit (2 for
    bad flags, 1 for the rest), never a traceback. argv None: the process's own command line
    (the console script, `python -m chatapp.cli`), whose Ctrl-C is taken back."""
    if argv is None:
        _ctrl_c_stops()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="chatapp", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # `chatapp history`: the help is the answer
        print(exc.ctx.get_help())
        code = 0
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        code = 130
    except _CLI_ERRORS as exc:  # click's usage errors: bad flags, a missing argument
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _error(message)
        code = getattr(exc, "exit_code", 2) or 2
    except ChatappError as exc:
        _error(exc)  # (it may name a file or quote a server: shown, never run, on a terminal)
        code = 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


def _ctrl_c_stops() -> None:
    """Ctrl-C (SIGINT) stops a command, however it was started.

    A shell without job control starts its `&` jobs with SIGINT ignored (a script's or
    `bash -c`'s `cmd &`; a CI runner or a test suite started so passes it on to every command
    it runs), and Python then keeps it ignored: a pull, a quantize or a bench ran on for
    minutes through Ctrl-C and `kill -INT` (the pull's Ctrl-C test timed out in a suite run so,
    and only there). Every command here is run for whoever started it and promises that Ctrl-C
    stops it cleanly (exit 130, what was done kept), so the KeyboardInterrupt handler goes back
    in. One that is to outlive a terminal's Ctrl-C is started in a session of its own
    (`setsid chatapp ...`), which the terminal's Ctrl-C never reaches."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _error(message: object) -> None:
    """One `error:` line, whatever the message quotes (a path or value with a newline in it)."""
    print(for_stream(sys.stderr)(one_line(f"error: {message}")), file=sys.stderr)


if __name__ == "__main__":
    main()
