"""How far a job is: the TUI's one line (whole numbers, the rate over what this run did), and
the command line's bars (rich's Progress), printed once, as they ended, into a file or pipe."""

from __future__ import annotations

import io

from rich.console import Console

from chatapp.progress import bars, progress_text


def test_a_resumed_download_counts_what_was_there_but_not_in_its_rate():
    # 3.0 MB were there; this run fetched 1.0 MB more in 2 s: 0.5 MB/s, 12.0 MB left -> 24 s
    line = progress_text(4e6, 16e6, 2.0, "bytes", base=3e6)
    assert line == "4.0 MB/16.0 MB, 500.0 kB/s, 24 s left"
    assert progress_text(120, 512, 2.0) == "120/512 tokens, 60 t/s, 7 s left"


class Clock:
    """The time rich reads (it measures the rate itself), moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def file_console(clock: Clock) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, get_time=clock, color_system=None), out


def test_into_a_file_each_bar_is_printed_once_when_the_block_ends():
    clock = Clock()
    console, out = file_console(clock)
    with bars("bytes", console) as bar:
        for name in ("a-00001-of-00002.gguf", "a-00002-of-00002.gguf"):
            line = bar(name)
            for done in range(0, 17, 4):
                clock.now += 1
                line(done * 1e6, 16e6, 0.0)
        assert out.getvalue() == "", "nothing while the jobs run: no line per update"
    lines = out.getvalue().splitlines()
    assert [ln.split()[0] for ln in lines] == ["a-00001-of-00002.gguf", "a-00002-of-00002.gguf"]
    assert all("16.0/16.0 MB" in ln and "4.0 MB/s" in ln for ln in lines), lines


def test_a_resumed_download_s_rate_leaves_out_what_was_there():
    clock = Clock()
    console, out = file_console(clock)
    with bars("bytes", console) as bar:
        line = bar("f.gguf")
        line(3.5e6, 16e6, 0.0, 3e6)  # 3.0 MB were there when this run began
        clock.now += 2
        line(4.5e6, 16e6, 2.0, 3e6)  # 1.0 MB more in 2 s
    (shown,) = out.getvalue().splitlines()
    assert "4.5/16.0 MB" in shown and "500.0 kB/s" in shown, shown
    assert "0:00:23" in shown, shown  # 11.5 MB left at 0.5 MB/s


def test_tokens_show_done_of_total_and_their_rate():
    clock = Clock()
    console, out = file_console(clock)
    with bars("tokens", console) as bar:
        line = bar("q8.gguf")
        for done in (0, 120, 240):  # (rich's rate: from its first report of progress on)
            line(done, 512, 0.0)
            clock.now += 2
    (shown,) = out.getvalue().splitlines()
    assert "240/512" in shown and "60 t/s" in shown, shown


def test_a_name_is_shown_as_it_is_and_no_bar_prints_nothing():
    clock = Clock()
    console, out = file_console(clock)
    with bars("bytes", console) as bar:
        bar("[bold red]x[/].gguf")(1, 1, 0.0)
    assert out.getvalue().startswith("[bold red]x[/].gguf "), "a file name is never markup"
    console, out = file_console(clock)
    with bars("bytes", console):
        pass  # (a pull of a file already here makes no bar)
    assert out.getvalue() == ""
