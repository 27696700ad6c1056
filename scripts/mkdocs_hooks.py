"""mkdocs hooks: the app's screenshots (screenshots/*.svg, made from the real app) are served
at the site's screenshots/ without a copy in docs/, and pages link them as ../screenshots/, a
path that works on GitHub too."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

SHOTS = Path(__file__).resolve().parents[1] / "screenshots"


def on_files(files, config):
    for svg in sorted(SHOTS.glob("*.svg")):
        files.append(File.generated(config, f"screenshots/{svg.name}", abs_src_path=str(svg)))
    return files


def on_page_markdown(markdown, page, config, files):
    # Pages sit at the top of docs/: ../screenshots/ on GitHub is screenshots/ on the site.
    return markdown.replace("](../screenshots/", "](screenshots/")
