"""The texts `chatapp bench --draft` asks for: tuning tasks the draft policy was tuned on, and
held-out tasks it is judged on (never used to choose a constant)."""

from __future__ import annotations

from dataclasses import dataclass

EDIT_TOKENS = 256  # an edit's reply runs to its end (EOG) or this far


@dataclass(frozen=True)
class DraftTask:
    name: str
    prompt: str
    tokens: int = EDIT_TOKENS
    edit: bool = True  # False: free-form text, where drafting must never cost


# ---- tuning: the texts the policy's constants were chosen on ---------------------------------

# About 300 words of plain prose for the rewrite task: the reply repeats it with small edits,
# so most of it can be drafted from the prompt.
PASSAGE = (
    "The old lighthouse stood at the end of a narrow spit of rock, and for ninety years it had "
    "kept the same slow rhythm: a long flash, a short dark, a long flash again. The keeper who "
    "lived there in the last years before the lamp was automated was a quiet man named Thomas "
    "Hale. He rose before dawn, climbed the hundred and twelve steps to the lantern room, "
    "cleaned the great lens with a soft cloth and a little vinegar, and wrote the weather in a "
    "leather book. In the afternoons he mended nets for the fishermen in the village, who paid "
    "him in bread, in eggs, and sometimes in news from the mainland. In winter the storms came "
    "in from the west, and the whole tower hummed like a struck bell. On those nights Thomas did "
    "not sleep at all. He sat beside the lamp with a pot of tea and listened to the wind, and "
    "when a ship passed close to the reef he watched its lights until they were safely past. "
    "One morning in early spring he found a green glass bottle wedged between two rocks below "
    "the tower. Inside was a letter written in careful blue ink. It was from a girl on an island "
    "far to the south, who said that she had thrown twelve bottles into the sea and wanted to "
    "know how far the water could carry a question. Her question was simple: what do you see "
    "from your window? Thomas read the letter three times. Then he sat at the kitchen table and "
    "began to write an answer, describing the rocks, the birds, the changing colour of the water "
    "and the lamp that turned above him every night of the year. When he had finished, he "
    "sealed the letter in the same green bottle and carried it down to the shore at low tide."
)
# A passage of the Apache License 2.0 (section 4, as published), ordinary code, and a list.
LICENCE = (
    "You may reproduce and distribute copies of the Work or Derivative Works thereof in any "
    "medium, with or without modifications, and in Source or Object form, provided that You "
    "meet the following conditions: You must give any other recipients of the Work or "
    "Derivative Works a copy of this License; and You must cause any modified files to carry "
    "prominent notices stating that You changed the files; and You must retain, in the Source "
    "form of any Derivative Works that You distribute, all copyright, patent, trademark, and "
    "attribution notices from the Source form of the Work, excluding those notices that do not "
    "pertain to any part of the Derivative Works."
)
CODE = """def load_settings(path):
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def merge_settings(defaults, settings):
    merged = dict(defaults)
    for key, value in settings.items():
        if value:
            merged[key] = value
    return merged
"""
SHOPPING = (
    "- two loaves of brown bread\n- a dozen free-range eggs\n- one litre of whole milk\n"
    "- a bag of green apples\n- fresh basil and parsley\n- three tins of chopped tomatoes\n"
    "- a block of cheddar cheese\n- washing-up liquid\n- a packet of black tea\n"
    "- two kilos of potatoes"
)
TUNING = (
    DraftTask(
        "rewrite",
        "Rewrite the following text, changing the keeper's name from Thomas Hale to Peter Grey. "
        "Keep every other word the same.\n\n" + PASSAGE,
    ),
    DraftTask(
        "licence edit",
        "Repeat the following text exactly, but write 'the recipient' instead of 'You' "
        "throughout.\n\n" + LICENCE,
    ),
    DraftTask(
        "code rename",
        "Rename the variable `settings` to `options` in this Python code and print the whole "
        "code again, changing nothing else.\n\n" + CODE,
    ),
    DraftTask(
        "list reorder",
        "Sort this shopping list alphabetically and print it again as a list.\n\n" + SHOPPING,
    ),
    DraftTask(
        "free-form",
        "Write a long story about a fox who learns to sail a small boat.",
        tokens=128,
        edit=False,
    ),
)

# ---- held out: written after the policy was tuned, used only to judge it ---------------------
# A text was kept when the bundled 135M model's plain greedy reply copies it (judged on that
# reply alone: longer passages, other code and other phrasings it did not copy at all, so
# they measured nothing); the list it turns into a looping sentence, which is kept as it is.

BAKERY = (
    "Every weekday at half past four, Margaret Lowe unlocked the side door of the bakery on "
    "Mill Street and switched on the ovens. The dough for the morning loaves had risen "
    "overnight in tall tin bowls covered with damp linen. Margaret shaped each loaf by hand, "
    "dusted it with flour and cut three quick lines across the top with a razor. While the "
    "bread baked she made the rolls, the currant buns and a tray of small almond cakes that "
    "the schoolchildren bought on their way past. At seven o'clock her nephew arrived to carry "
    "the crates to the van, and by eight the shelves in the front of the shop were full. "
    "Margaret liked the hour after opening best."
)
USERS = """def load_users(path):
    users = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            name, _, email = line.partition(",")
            users[name.strip()] = email.strip()
    return users
"""
PACKING = (
    "- a warm sleeping bag\n- a small gas stove\n- two water bottles\n- a map of the valley\n"
    "- spare woollen socks\n- a first-aid kit\n- matches in a tin\n- a rain jacket\n"
    "- a torch with new batteries\n- oat biscuits and dried fruit"
)
HELD_OUT = (
    DraftTask(
        "name swap",
        "Rewrite the following text, changing the baker's name from Margaret Lowe to Alice "
        "Turner. Keep every other word the same.\n\n" + BAKERY,
    ),
    DraftTask(
        "variable rename",
        "Rename the variable `users` to `people` in this Python code and print the whole code "
        "again, changing nothing else.\n\n" + USERS,
    ),
    DraftTask(
        "list reorder",
        "Sort this packing list alphabetically and print it again as a list.\n\n" + PACKING,
    ),
    DraftTask(
        "free-form 128",
        "Write an essay about why people keep diaries.",
        tokens=128,
        edit=False,
    ),
    DraftTask(
        "free-form 512",
        "Write a long story about a girl who builds a kite with her grandfather.",
        tokens=512,
        edit=False,
    ),
)
