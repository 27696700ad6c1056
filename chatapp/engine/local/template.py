"""Chat templates from GGUF metadata, rendered in a jinja2 sandbox, with a plain fallback."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import jinja2
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


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render(
    template: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """Render a chat template; raises TemplateError with the reason on any failure."""
    try:
        compiled = _environment().from_string(template)
        return compiled.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
    except (TemplateError, TimeoutError):
        raise  # TimeoutError: the caller's time bound, reported as such
    except jinja2.exceptions.SecurityError as exc:
        reason = str(exc).rstrip(".")
        raise TemplateError(f"the template tried something unsafe: {reason}") from exc
    except Exception as exc:  # any jinja/Python error inside the template
        raise TemplateError(f"{type(exc).__name__}: {exc}") from exc


def render_fallback(messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    return render(FALLBACK_TEMPLATE, messages, add_generation_prompt=add_generation_prompt)
