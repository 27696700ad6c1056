"""Chat templates from GGUF metadata, rendered in a jinja2 sandbox, with a plain fallback.

The environment offers what published templates rely on (the same as Hugging Face
transformers' chat templating): loop controls, `{% generation %}` blocks, `tojson` with its
arguments, `raise_exception`, `strftime_now`. `tools` / `documents` / `functions` are left
undefined, as llama.cpp does: jinja's Undefined is falsy, iterates as empty and has length 0,
while None (transformers' choice) breaks templates that loop over `tools` once it `is defined`.
An undefined name joined to text with `+` is empty text, as llama.cpp renders it (jinja2 would
raise: firefunction-v2 adds the undefined `functions` and `datetime` to its system prompt).
A template that refuses a system message gets it folded into the first user turn.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatapp.engine.protocol import ChatMessage
from chatapp.errors import ChatappError

# For models without a template (base models such as gemma3 270M): plain role-labelled text.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}{{ m.content }}\n\n"
    "{% elif m.role == 'user' %}User: {{ m.content }}\n"
    "{% else %}Assistant: {{ m.content }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
FALLBACK_STOPS = ("\nUser:",)


class TemplateError(ChatappError):
    """The model's chat template could not be rendered."""


class _Refused(TemplateError):
    """The template itself called raise_exception (e.g. "System role not supported")."""


class Rendered(NamedTuple):
    text: str
    folded_system: bool = False  # the template refused a system role: it went into the user turn


def _raise_exception(message: str) -> None:
    raise _Refused(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' tojson: plain json.dumps (no HTML escaping), with its arguments."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _Undefined(jinja2.Undefined):
    """jinja's Undefined (falsy, empty, "" when printed, an error on attribute access), except
    that `text + undefined` and `undefined + text` are the text, as in llama.cpp."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other
        return super().__add__(other)

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other
        return super().__radd__(other)


class GenerationExtension(Extension):
    """`{% generation %}...{% endgeneration %}` (marks the assistant's tokens for training in
    transformers): rendered as its content."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[nodes.Node]:
        next(parser.stream)  # the `generation` token
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=_Undefined,
        extensions=["jinja2.ext.loopcontrols", GenerationExtension],
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


def fold_system(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """A leading system message put into the first user message (as llama.cpp and transformers
    do for templates without a system role): system + "\\n\\n" + user."""
    if not messages or messages[0].role != "system":
        return list(messages)
    system, rest = messages[0], list(messages[1:])
    for i, m in enumerate(rest):
        if m.role == "user":
            rest[i] = ChatMessage("user", f"{system.content}\n\n{m.content}")
            return rest
    return [ChatMessage("user", system.content), *rest]


def render(
    template: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = None,
) -> Rendered:
    """Render a chat template; raises TemplateError with the reason on any failure.

    When the template refuses the conversation (raise_exception) and it starts with a system
    message, it is rendered again with the system text folded into the first user message;
    the result says so (folded_system)."""
    try:
        compiled = _environment().from_string(template)
    except TimeoutError:
        raise
    except Exception as exc:
        raise _reason(exc) from exc
    context: dict[str, Any] = {
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt,
    }  # tools / documents / functions stay undefined (jinja: falsy, empty), as in llama.cpp
    if enable_thinking is not None:
        context["enable_thinking"] = enable_thinking
    try:
        return Rendered(_render(compiled, messages, context))
    except _Refused as exc:
        if not messages or messages[0].role != "system":
            raise TemplateError(str(exc)) from exc
        refused = exc
    except (TemplateError, TimeoutError):
        raise  # TimeoutError: the caller's time bound, reported as such
    except Exception as exc:
        raise _reason(exc) from exc
    try:
        return Rendered(_render(compiled, fold_system(messages), context), folded_system=True)
    except TimeoutError:
        raise
    except Exception:
        raise TemplateError(str(refused)) from refused  # the first reason is the one to name


def _render(compiled: jinja2.Template, messages: Sequence[ChatMessage], context: dict) -> str:
    return compiled.render(
        messages=[{"role": m.role, "content": m.content} for m in messages], **context
    )


def _reason(exc: Exception) -> TemplateError:
    if isinstance(exc, TemplateError):
        return exc
    if isinstance(exc, jinja2.exceptions.SecurityError):
        reason = str(exc).rstrip(".")
        return TemplateError(f"the template tried something unsafe: {reason}")
    return TemplateError(f"{type(exc).__name__}: {exc}")  # any jinja/Python error in it


def render_fallback(messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    return render(FALLBACK_TEMPLATE, messages, add_generation_prompt=add_generation_prompt).text
