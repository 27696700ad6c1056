"""Schemas whose replies can start and end: no loop writing nothing, no value that never ends."""

from __future__ import annotations

from chatapp.engine.schema_words import fail

Path = tuple[str, ...]
LOOP = (
    "leads back to itself through $ref, anyOf or oneOf before any value is written; a reply "
    "could never start"
)

# A loop of $ref, anyOf and oneOf is a left-recursive grammar, which llama.cpp refuses; a node
# whose every value must hold another like it would let a reply start and never finish.


def _steps(node: dict, refs: dict[str, dict]):
    """The nodes a node's value may be, before anything is written: its $ref, its alternatives."""
    if "$ref" in node:
        yield ("$ref",), refs[node["$ref"]]
    for key in ("anyOf", "oneOf"):
        for i, alt in enumerate(node.get(key, ())):
            yield (key, str(i)), alt


def check_loops(nodes: list[tuple[Path, dict]], refs: dict[str, dict]) -> None:
    """Refuse a loop of $ref, anyOf and oneOf, naming the step that closes it."""
    places = {id(node): path for path, node in nodes}
    state: dict[int, str] = {}

    def visit(node: dict) -> None:
        state[id(node)] = "open"
        for step, nxt in _steps(node, refs):
            if state.get(id(nxt)) == "open":
                raise fail(places[id(node)] + step, LOOP)
            if id(nxt) not in state:
                visit(nxt)
        state[id(node)] = "done"

    for _, node in reversed(nodes):  # (from the top: the loop is named where it closes)
        if id(node) not in state:
            visit(node)


def check_finite(nodes: list[tuple[Path, dict]], refs: dict, types: dict[int, list[str]]) -> None:
    """Refuse a node no finite value matches (every one needs another inside it, as an array
    whose minItems are of its own kind): the grammar could start a reply and never end it."""
    ends: set[int] = set()
    grew = True
    while grew:
        grew = False
        for _, node in nodes:
            if id(node) not in ends and _can_end(node, refs, types, ends):
                ends.add(id(node))
                grew = True
    for path, node in nodes:
        if id(node) not in ends:
            raise fail(path, "has no value that ends: each must hold another like it (through "
                       "$ref), so a reply could never finish")  # fmt: skip


def _can_end(node: dict, refs: dict, types: dict[int, list[str]], ends: set[int]) -> bool:
    if "enum" in node:
        return True
    if "$ref" in node:
        return id(refs[node["$ref"]]) in ends
    for key in ("anyOf", "oneOf"):
        if key in node:
            return any(id(alt) in ends for alt in node[key])
    kinds = types.get(id(node)) or ["object"]
    if "array" in kinds:
        prefix, items = node.get("prefixItems", []), node.get("items")
        need = [prefix[i] if i < len(prefix) else items for i in range(node.get("minItems", 0))]
        if all(not isinstance(n, dict) or id(n) in ends for n in need):
            return True
    if "object" in kinds:
        props = node.get("properties", {})
        if all(id(props[name]) in ends for name in node.get("required", ())):
            return True
    return any(k not in ("array", "object") for k in kinds)
