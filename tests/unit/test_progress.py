"""The one progress line: whole numbers, the rate and time left over what this run did."""

from __future__ import annotations

import io

from chatapp.progress import ProgressBar, progress_text


def test_a_resumed_download_counts_what_was_there_but_not_in_its_rate():
    # 3.0 MB were there; this run fetched 1.0 MB more in 2 s: 0.5 MB/s, 12.0 MB left -> 24 s
    line = progress_text(4e6, 16e6, 2.0, "bytes", base=3e6)
    assert line == "4.0 MB/16.0 MB, 500.0 kB/s, 24 s left"
    assert progress_text(120, 512, 2.0) == "120/512 tokens, 60 t/s, 7 s left"


def test_the_bar_shows_the_same_line():
    out = io.StringIO()
    ProgressBar("f.gguf", stream=out, unit="bytes")(16e6, 16e6, 2.0, 3e6)
    assert out.getvalue().rstrip("\n").endswith(progress_text(16e6, 16e6, 2.0, "bytes", 3e6))
    assert "16.0 MB/16.0 MB, 6.5 MB/s" in out.getvalue()
