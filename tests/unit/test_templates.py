"""Chat templates as published models use them (tests/data/templates, see SOURCES.md), rendered
by chatapp's sandbox: they render (no fallback), keep every message, and end with the model's
generation prompt."""

from __future__ import annotations

import pytest
from helpers import CHAT, GENERATION_PROMPT, TEMPLATES

from chatapp.engine.local.load import chat_template
from chatapp.engine.local.load.chat_template import TemplateError, fold_system, render
from chatapp.engine.local.load.timebound import call_with_timeout
from chatapp.engine.protocol import ChatMessage

BOS, EOS = "<BOS>", "<EOS>"

# The whole prompt of a one-turn chat ("Hi"), where it does not hold today's date or a long
# default system prompt.
ONE_TURN = {
    "deepseek-r1-distill-llama": "<BOS><｜User｜>Hi<｜Assistant｜><think>\n",
    "deepseek-r1-distill-qwen": "<BOS><｜User｜>Hi<｜Assistant｜><think>\n</think>",
    "gemma2": "<BOS><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "gemma4": "<BOS><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>",
    "lfm2": "<BOS><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "lfm2.5": "<BOS><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "llama3.1": (
        "<BOS><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "mistral-nemo": "<BOS>[INST]Hi[/INST]",
    "phi3.5": "<|user|>\nHi<|end|>\n<|assistant|>\n",
    "phi4": "<|im_start|>user<|im_sep|>Hi<|im_end|><|im_start|>assistant<|im_sep|>",
    "qwen2.5": (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ),
    "qwen3": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
}

# Templates without a system role: the system text goes into the first user turn.
NO_SYSTEM_ROLE = {"gemma2"}


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def test_every_collected_template_is_listed():
    names = {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert names == set(GENERATION_PROMPT)
    sources = (TEMPLATES / "SOURCES.md").read_text(encoding="utf-8")
    for name in names:
        assert f"`{name}.jinja`" in sources, f"{name}: no source noted in SOURCES.md"


@pytest.mark.parametrize("name", sorted(GENERATION_PROMPT))
def test_real_template_renders_the_whole_chat(name):
    out = render(source(name), CHAT, bos_token=BOS, eos_token=EOS, add_generation_prompt=True)
    for m in CHAT:
        assert m.content in out.text, f"{m.role} message missing"
    assert out.text.endswith(GENERATION_PROMPT[name])
    assert out.folded_system == (name in NO_SYSTEM_ROLE)


@pytest.mark.parametrize("name", sorted(ONE_TURN))
def test_real_template_one_turn_exactly(name):
    out = render(source(name), [ChatMessage("user", "Hi")], bos_token=BOS, eos_token=EOS)
    assert out.text == ONE_TURN[name]
    assert not out.folded_system


def test_system_role_refused_is_folded_into_the_first_user_turn():
    out = render(source("gemma2"), CHAT, bos_token=BOS)
    assert out.folded_system
    assert out.text == (
        "<BOS><start_of_turn>user\nYou are a terse pirate.\n\nFirst question?<end_of_turn>\n"
        "<start_of_turn>model\nFirst answer.<end_of_turn>\n"
        "<start_of_turn>user\nSecond question?<end_of_turn>\n<start_of_turn>model\n"
    )


def test_fold_system():
    sys_, user = ChatMessage("system", "S"), ChatMessage("user", "U")
    assert fold_system([sys_, user]) == [ChatMessage("user", "S\n\nU")]
    assert fold_system([user]) == [user]
    assert fold_system([sys_]) == [ChatMessage("user", "S")]


def test_refusal_without_a_system_message_is_named():
    tpl = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(TemplateError, match="^Conversation roles must alternate$"):
        render(tpl, [ChatMessage("user", "hi")])


def test_refusal_that_folding_does_not_cure_names_the_first_reason():
    tpl = (
        "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ raise_exception('never renders') }}"
    )
    with pytest.raises(TemplateError, match="^System role not supported$"):
        render(tpl, CHAT)


def test_loop_controls():
    tpl = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{{ m.content }};{% if m.role == 'assistant' %}{% break %}{% endif %}{% endfor %}"
    )
    assert render(tpl, CHAT).text == "First question?;First answer.;"


def test_generation_block_renders_its_content():
    tpl = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
        "[{{ m.content }}]{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"
    )
    assert render(tpl, CHAT[1:3]).text == "First question?[First answer.]"


def test_tojson_takes_transformers_arguments():
    ctx = "{% set d = {'b': 1, 'a': '<é>'} %}"
    assert render(ctx + "{{ d | tojson }}", []).text == '{"b": 1, "a": "<é>"}'
    assert render(ctx + "{{ d | tojson(sort_keys=True) }}", []).text == '{"a": "<é>", "b": 1}'
    assert render(ctx + "{{ d | tojson(indent=2) }}", []).text == ('{\n  "b": 1,\n  "a": "<é>"\n}')
    tpl = ctx + "{{ d | tojson(separators=(',', ':'), ensure_ascii=True) }}"
    assert render(tpl, []).text == '{"b":1,"a":"<\\u00e9>"}'


def test_strftime_now_and_tokens():
    out = render(
        "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ eos_token }}",
        [],
        bos_token="<s>",
        eos_token="</s>",
    )
    assert out.text == "<s>4</s>"


def test_tools_documents_functions_read_without_defaults():
    tpl = (
        "{% if tools %}T{% endif %}{% for d in documents %}D{% endfor %}"
        "{{ functions | length }}{% if tools is not defined %}-{% endif %}"
    )
    assert render(tpl, []).text == "0-"


def test_undefined_variables_concatenate_as_empty_text():
    """As llama.cpp renders them (firefunction-v2 adds `functions` and `datetime`, which nobody
    passes, to its system prompt): an undefined name joined to text with `+` is empty text,
    as `{{ nothing }}` already was; everything else about it stays jinja's Undefined."""
    assert render("{{ 'a' + nothing + 'b' }}|{{ nothing }}", []).text == "ab|"
    assert render("{% set s = 'x' %}{% set s = s + '\\n' + nothing %}{{ s }}", []).text == "x\n"
    assert render("{{ (nothing ~ 'c') | length }}", []).text == "1"
    out = render(source("firefunction-v2"), [ChatMessage("user", "Hi")], bos_token=BOS).text
    assert out == (
        "<BOS><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant with "
        "access to functions.\n"
        + out.split("functions.\n", 1)[1].split("<|eot_id|>")[0]
        + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert "Available functions as JSON spec:\n\nToday is .<|eot_id|>" in out


def test_enable_thinking_is_passed_only_when_given():
    tpl = "{{ 'unset' if enable_thinking is not defined else enable_thinking }}"
    assert render(tpl, []).text == "unset"
    assert render(tpl, [], enable_thinking=False).text == "False"
    qwen3 = render(source("qwen3"), [ChatMessage("user", "Hi")], enable_thinking=False).text
    assert qwen3.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_sandbox_and_errors_as_before():
    with pytest.raises(TemplateError, match="unsafe"):
        render("{{ ''.__class__.__mro__ }}", [])
    with pytest.raises(TemplateError, match="^TemplateSyntaxError: "):
        render("{% if %}", [])
    with pytest.raises(TemplateError, match="^UndefinedError: "):
        render("{{ nothing.here }}", [])


def test_time_bound_still_applies():
    tpl = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TimeoutError):
        call_with_timeout(lambda: render(tpl, CHAT), 0.2)


def test_fallback_still_plain():
    assert chat_template.render_fallback(CHAT) == (
        "You are a terse pirate.\n\nUser: First question?\nAssistant: First answer.\n"
        "User: Second question?\nAssistant:"
    )
