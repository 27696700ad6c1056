"""Fixtures of the fault tests: bad model files, and copies of the real model with odd templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.gguf_files import with_string

from chatapp.models.bundled import smollm2_path

TEMPLATES = {
    "raises": "{{ raise_exception('this template always fails') }}",
    "escapes": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ cycler.__init__.__globals__.os.system('echo pwned') }}",
    "loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    ),
    # Gemma 2's real template: it refuses a system message ("System role not supported").
    "no_system": (Path(__file__).parent.parent / "data/templates/gemma2.jinja").read_text(),
}


@pytest.fixture(scope="session")
def template_models(tmp_path_factory) -> dict:
    """The bundled model with each chat template above (98 MB each, made once, ~0.2 s each)."""
    folder = tmp_path_factory.mktemp("templates")
    return {
        name: with_string(
            smollm2_path(), folder / f"smollm2-{name}.gguf", "tokenizer.chat_template", source
        )
        for name, source in TEMPLATES.items()
    }
