"""Render SVG screenshots of the real app on the bundled model into screenshots/.

Run: python screenshots/make_screenshots.py   (takes about half a minute on 2 cores)
Only some: python screenshots/make_screenshots.py pick versus
(the shots: main, pick, thinking, drafts, versus, inside, grammar, steering, limits, lesson)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.tokens import TokenStrip

os.environ.setdefault("CHATAPP_AUTOTUNE", "0")  # no tune on first use in the pictures
OUT = Path(__file__).resolve().parent
SIZE = (132, 42)
# Long enough to be caught mid-stream (~300 tokens, ~2 s here): a reply that ends by itself
# within a second can finish between two of the paced frames (2-core CPU: up to 1 s apart).
PROMPT = (
    "Explain why the sky is blue. Then write a short Python program that prints the colours "
    "of the rainbow, and explain it line by line."
)


async def wait_until(pilot, predicate, timeout: float = 120.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise TimeoutError("the app did not get there in time")


def pane(app: ChatApp):
    """The chat's ConversationPane: the conversation and its live reply."""
    return app.chat_screen.pane


async def ask(pilot, app: ChatApp, text: str) -> None:
    """Send `text` once the model is loaded and wait for the whole reply."""
    app.query_one("#prompt").cursor_blink = False
    await wait_until(pilot, lambda: app.slot.engine is not None)
    app.query_one("#prompt").text = text
    app.query_one("#prompt").focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None)


def greedy_app(max_tokens: int, **kwargs) -> ChatApp:
    """The real app on the bundled model (ctx 2048, CPU), greedy: what most shots show."""
    options = LoadOptions(model_path=str(smollm2_path()), n_ctx=2048, n_gpu_layers=0)
    return ChatApp(
        lambda: LocalEngine(options),
        settings=SamplerSettings(temperature=0.0, max_tokens=max_tokens),
        model_label="SmolLM2-135M-Instruct.Q4_1.gguf",
        **kwargs,
    )


def most_uncertain_step(tokens) -> int:
    """The step whose best candidate is least sure: the most interesting one to show."""
    return min(
        range(len(tokens)), key=lambda i: tokens[i].candidates[0].p if tokens[i].candidates else 1.0
    )


async def main() -> None:
    options = LoadOptions(model_path=str(smollm2_path()), n_ctx=4096, n_gpu_layers=0)
    settings = SamplerSettings(
        temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, seed=7, max_tokens=300
    )
    app = ChatApp(
        lambda: LocalEngine(options),
        settings=settings,
        model_label="SmolLM2-135M-Instruct.Q4_1.gguf",
    )
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").cursor_blink = False
        await wait_until(pilot, lambda: app.slot.engine is not None)
        app.query_one("#prompt").text = PROMPT
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: pane(app).reply is not None and len(pane(app).reply.tokens) >= 60
        )
        # The side panels follow at their own cadence (once a second where the model's threads
        # fill the CPU): the picture waits for their first update after the first token.
        stats = app.query_one(StatsPanel)
        await wait_until(pilot, lambda: pane(app).reply is None or stats.stats.tokens > 1)
        app.save_screenshot(str(OUT / "chat-streaming.svg"))
        await wait_until(pilot, lambda: pane(app).reply is None)
        app.clear_notifications()

        tokens = pane(app).last_reply.tokens
        step = most_uncertain_step(tokens)
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        await pilot.pause(0.2)
        app.save_screenshot(str(OUT / "probabilities.svg"))

        app.query_one("#tabs").active = "tab-tokens"
        box = app.query_one("#tokenizer-input")
        box.value = "It works on any sentence you type: naïve café 🦙"
        await pilot.pause(0.5)
        app.save_screenshot(str(OUT / "tokens-reply.svg"))
        await pilot.press("f4")
        await pilot.pause(0.2)
        app.save_screenshot(str(OUT / "tokens-prompt.svg"))

        app.query_one("#tabs").active = "tab-probs"
        app.theme = "chatapp-light"
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "light-theme.svg"))
    await thinking_shot()
    print("\n".join(sorted(p.name for p in OUT.glob("*.svg"))), file=sys.stderr)


# A thinking-style template (its generation prompt opens <think>, as Qwen3's and the
# DeepSeek-R1 distills' do) on the bundled model: the reasoning streams into its block.
THINKING_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


async def thinking_shot() -> None:
    options = LoadOptions(
        model_path=str(smollm2_path()), n_ctx=2048, n_gpu_layers=0, chat_template=THINKING_CHATML
    )
    app = ChatApp(
        lambda: LocalEngine(options),
        settings=SamplerSettings(temperature=0.0, max_tokens=90),
        model_label="SmolLM2-135M-Instruct.Q4_1.gguf (thinking template)",
    )
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, app, "Why is the sky blue? Think first.")
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "thinking.svg"))


async def pick_shot() -> None:
    """A token picked in the Next-token panel: the reply goes on from it as branch 2/2."""
    app = greedy_app(60)
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, app, "Describe the sea at night in two sentences.")
        step = most_uncertain_step(pane(app).last_reply.tokens[:20])
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        await pilot.pause(0.2)
        app.query_one("#probs").focus()
        await pilot.press("down", "enter")  # the runner-up at the least sure step
        await wait_until(pilot, lambda: pane(app).reply is not None)
        await wait_until(pilot, lambda: pane(app).reply is None)
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        app.query_one("#probs").focus()
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "pick-token.svg"))


REWRITE = (
    "Repeat this text exactly, changing 'keeper' to 'warden': The keeper climbed the hundred "
    "and twelve steps to the lantern room every morning, cleaned the great lens with a soft "
    "cloth, and wrote the weather in a leather book."
)


async def drafts_shot() -> None:
    """Speculative decoding with n-gram drafts on a rewrite: accepted drafts underlined in the
    Tokens tab, the drafts turned down shown (d), the Speed panel's note on the reply."""
    from chatapp.config import Config

    app = greedy_app(120, config=Config(draft="ngram"))
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, app, REWRITE)
        app.query_one("#tabs").active = "tab-tokens"
        strip = app.query_one("#reply-tokens", TokenStrip)
        strip.show_rejected = True
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "drafts.svg"))


async def versus_shot() -> None:
    """Q4_1 and Q2_K of the bundled model side by side on one greedy prompt, a step where they
    part selected: both files' candidates there."""
    import tempfile
    from dataclasses import replace

    from chatapp.models import quantize
    from chatapp.ui.launch import versus_app
    from chatapp.ui.screens.versus import parting_step

    out = tempfile.mkdtemp(prefix="chatapp-shot-")
    q2 = quantize.quantize(smollm2_path(), "Q2_K", out, nthread=2).output
    options = LoadOptions(model_path=str(smollm2_path()), n_ctx=2048, n_gpu_layers=0, n_threads=1)
    app = versus_app(
        (lambda: LocalEngine(options), lambda: LocalEngine(replace(options, model_path=q2))),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q2_K.gguf"),
        settings=SamplerSettings(temperature=0.0, max_tokens=80),
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = app.versus
        app.query_one("#vs-prompt").cursor_blink = False
        await wait_until(pilot, lambda: all(s.engine is not None for s in screen.slots.values()))
        app.query_one("#vs-prompt").text = "Describe the sea at night in two sentences."
        app.query_one("#vs-prompt").focus()
        await pilot.press("enter")
        columns = screen.columns.values()
        await wait_until(pilot, lambda: all(c.finished is not None for c in columns))
        await wait_until(pilot, lambda: not screen.busy)
        a, b = (c.tokens for c in columns)
        screen.cursor = parting_step(a, b)
        screen.redraw()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "versus.svg"))


async def inside_shot() -> None:
    """The Inside tab on the token that answers a question: the layers where the answer
    forms (logit lens), what the token attended to, its neighbours."""
    from textual.widgets import TabbedContent

    from chatapp.ui.widgets.inside import InsidePanel

    app = greedy_app(24)
    async with app.run_test(size=(170, 50)) as pilot:
        await ask(pilot, app, "What is the capital of France? Answer in one sentence.")
        tokens = pane(app).last_reply.tokens
        step = next(i for i, t in enumerate(tokens) if b"Paris" in t.piece)
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        app.query_one(TabbedContent).active = "tab-inside"
        panel = app.query_one(InsidePanel)
        await wait_until(pilot, lambda: panel.inspection is not None)
        panel.focus()
        await pilot.pause(0.2)
        panel.scroll_to(y=12, animate=False)  # the last layers, where ' Paris' forms
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "inside.svg"))


GRAMMAR_SCHEMA = """{"type": "object", "properties": {
  "city": {"type": "string"},
  "country": {"type": "string", "enum": ["France", "Italy", "Spain"]},
  "population_millions": {"type": "integer", "minimum": 0, "maximum": 40}},
  "required": ["city", "country", "population_millions"]}"""


async def grammar_shot() -> None:
    """A reply held to a JSON schema: the Next token panel marks what the grammar cut (⊘)."""
    from chatapp.engine.schema_grammar import grammar_from_schema_text

    app = greedy_app(60)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        pane(app).session.grammar = grammar_from_schema_text(GRAMMAR_SCHEMA, "schema city.json")
        await ask(pilot, app, "Tell me about Paris as JSON.")
        tokens = pane(app).last_reply.tokens
        cut = [
            i
            for i, t in enumerate(tokens)
            if any(c.kept_grammar is False for c in (t.candidates or ()))
        ]
        step = max(cut, key=lambda i: sum(c.kept_grammar is False for c in tokens[i].candidates))
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        app.query_one("#probs").focus()
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "grammar-cut.svg"))


async def add_vector(pilot, app: ChatApp, name: str):
    """The Steer tab (alt+v): the built-in vector `name` added (made in a worker the first
    time, then kept); its SteerPanel once the strength slider is there."""
    from textual.widgets import Select

    from chatapp.ui.widgets.steer_panel import SteerPanel

    await wait_until(pilot, lambda: app.slot.engine is not None)
    await pilot.press("alt+v")
    panel = app.query_one(SteerPanel)
    await wait_until(pilot, lambda: bool(panel.query("#steer-choice")))
    panel.query_one("#steer-choice", Select).value = name
    await pilot.click("#steer-add")
    await wait_until(pilot, lambda: bool(panel.query("#steer-strength-0")))
    return panel


async def steering_shot() -> None:
    """A greedy reply bending where the happy slider moved to -4 (sad) mid-way: the Tokens tab marks
    the first token computed with it (▸), coloured by the concept meter of the reply."""
    from chatapp.ui.widgets.sampler import Slider

    app = greedy_app(240)  # long enough that the slider moves while it streams
    async with app.run_test(size=SIZE) as pilot:
        panel = await add_vector(pilot, app, "happy")
        pane(app).session.ignore_eos = True
        app.query_one("#prompt").cursor_blink = False
        app.query_one("#prompt").text = "Tell me about your day at the park."
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: pane(app).reply is not None)
        await wait_until(pilot, lambda: len((pane(app).reply or pane(app).last_reply).tokens) > 12)
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("shift+left", "shift+left")  # happy -4 (sad) from the next token
        await wait_until(pilot, lambda: pane(app).reply is None)
        strip = app.query_one("#reply-tokens", TokenStrip)
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("m")
        await wait_until(pilot, lambda: bool(strip.concept))
        app.query_one("#tabs").active = "tab-tokens"
        strip.cursor = min(strip.marks)
        panel.query_one("#steer-strength-0", Slider).focus()
        app.clear_notifications()
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / "steering.svg"))


async def limits_shot() -> None:
    """The Limits tab after a reply: its decode against this machine's measured memory
    ceiling, prefill against the compute peak, and the roofline (120x40 and 80x24; the
    ceilings as measured here before, else measured now)."""
    from textual.widgets import TabbedContent

    from chatapp import ceilings, cpus, machine

    if machine.saved_ceilings() is None:
        machine.remember_ceilings(ceilings.measure(cpus.usable_cpus()).to_dict())
    for size, name in (((120, 40), "limits.svg"), ((80, 24), "limits-80x24.svg")):
        app = greedy_app(120)
        async with app.run_test(size=size) as pilot:
            await ask(pilot, app, "Tell me about the moon in a few sentences.")
            if size[0] < 100:
                await pilot.press("f3")  # the narrow layout: the panels in place of the chat
                await pilot.pause(0.2)
            app.query_one(TabbedContent).active = "tab-limits"
            app.clear_notifications()
            await pilot.pause(0.5)
            app.save_screenshot(str(OUT / name))


LESSON_THEMES = (("chatapp-dark", SIZE, ""), ("chatapp-light", SIZE, "-light"))


async def lesson_shot() -> None:
    """Every step of the lesson, its panel showing this run's numbers: after a reply, the
    logit lens run on a word it was sure of (the Inside tab), a vector made and set (the Steer
    tab), the ceilings measured (the Limits tab). Dark and light at the screenshot size, and
    dark at 80x24: lesson-<N>-<id>[-light|-80x24].svg."""
    from textual.widgets import TabbedContent

    from chatapp import ceilings, cpus, machine
    from chatapp.ui.widgets.inside import InsidePanel
    from chatapp.ui.widgets.sampler import Slider

    if machine.saved_ceilings() is None:
        machine.remember_ceilings(ceilings.measure(cpus.usable_cpus()).to_dict())
    for old in OUT.glob("lesson-*.svg"):
        old.unlink()
    app = greedy_app(100)
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, app, "Tell me about Paris, the capital of France, in a few sentences.")
        lens_at = sure_word(pane(app).last_reply.tokens)
        app.query_one("#reply-tokens", TokenStrip).cursor = lens_at
        app.query_one(TabbedContent).active = "tab-inside"
        inside = app.query_one(InsidePanel)
        await wait_until(pilot, lambda: inside.inspection is not None)
        panel = await add_vector(pilot, app, "happy")
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("right", "right", "right")  # in use from the next reply
        # The probs step's text is about the reply's first token; the lens looked at a word.
        cursor = {"tokens": 0, "probs": 0, "inside": lens_at}
        for theme, size, suffix in (*LESSON_THEMES, ("chatapp-dark", (80, 24), "-80x24")):
            app.theme = theme
            await pilot.resize_terminal(*size)
            await walk_the_lesson(pilot, app, suffix, cursor)


async def walk_the_lesson(pilot, app: ChatApp, suffix: str, cursor: dict[str, int]) -> None:
    """The lesson from its first step, by its key (→), a picture of each step (the token
    strip's cursor where `cursor` names the step)."""
    from chatapp.chat import lesson

    app.query_one("#prompt").focus()  # empty: → steps the lesson
    app.chat_screen.lesson.start(0)
    for i, step in enumerate(lesson.STEPS):
        if step.id in cursor:  # before its tab opens: the Inside tab looks at it when shown
            app.query_one("#reply-tokens", TokenStrip).cursor = cursor[step.id]
        if i:
            await pilot.press("right")
        await pilot.pause(0.4)
        if step.id == "inside":
            last_layers_in_sight(app)
            await pilot.pause(0.2)
        app.clear_notifications()
        await pilot.pause(0.1)
        app.save_screenshot(str(OUT / f"lesson-{i + 1}-{step.id}{suffix}.svg"))


def sure_word(tokens) -> int:
    """A word of the reply (not its first) the model was sure of: where the logit lens shows
    the guess sharpen over the last layers (0 where there is none)."""
    words = (
        i
        for i, t in enumerate(tokens)
        if i and t.piece[:1] == b" " and len(t.piece) > 4 and t.piece[1:].isalpha()
    )
    return next((i for i in words if (tokens[i].logprob or -9.0) > -0.1), 0)


def last_layers_in_sight(app: ChatApp) -> None:
    """The Inside tab scrolled so that the logit lens's last rows, where the answer forms, end
    its view (its rows wrap at the tab's width)."""
    from textual.widgets import Static

    from chatapp.ui.widgets.inside import InsidePanel

    panel = app.query_one(InsidePanel)
    body = panel.query_one("#inside-body", Static)
    if panel.inspection is None:
        return
    lines = panel.render_inspection(panel.inspection).wrap(app.console, body.content_size.width)
    final = next((i for i, line in enumerate(lines) if line.plain.startswith("final")), 0)
    bottom = body.virtual_region.y + final + 2  # (its row may wrap to a second line)
    panel.scroll_to(
        y=max(0, bottom - panel.scrollable_content_region.height), animate=False, force=True
    )


SHOTS = {
    "main": main,
    "lesson": lesson_shot,
    "limits": limits_shot,
    "grammar": grammar_shot,
    "inside": inside_shot,
    "pick": pick_shot,
    "thinking": thinking_shot,
    "drafts": drafts_shot,
    "versus": versus_shot,
    "steering": steering_shot,
}


async def run(names: list[str]) -> None:
    for name in names or [
        "main",
        "pick",
        "drafts",
        "versus",
        "inside",
        "grammar",
        "steering",
        "limits",
        "lesson",
    ]:  # (main makes the thinking shot too)
        await SHOTS[name]()


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(SHOTS)
    if unknown:
        sys.exit(
            f"unknown screenshots: {', '.join(sorted(unknown))} (choose from {', '.join(SHOTS)})"
        )
    asyncio.run(run(sys.argv[1:]))
