"""A checked JSON schema as GBNF: our visit over llama-cpp-python's converter's rule bookkeeping."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

from chatapp.engine.int_range import int_bounds, int_range_rule
from chatapp.engine.schema_check import INT_BOUNDS, MAX_DEPTH, SchemaCheck
from chatapp.engine.schema_regex import gbnf_literal, pattern_gbnf, repeat
from chatapp.engine.schema_shape import FAMILY
from chatapp.engine.schema_words import GrammarError
from chatapp.textsafe import printable

# What the converter raises on input it cannot take (the check before it should leave none).
CONVERTER_ERRORS = (
    AssertionError, ValueError, KeyError, TypeError, IndexError, AttributeError,
    RecursionError, OverflowError, re.error,
)  # fmt: skip
HEX = "[0-9a-fA-F]"
CHAR = (
    r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] '
    + f"{HEX} {HEX} {HEX} | [dD] [0-7] {HEX} {HEX}))"
)
DAY = {31: '"0" [1-9] | [12] [0-9] | "3" [01]', 30: '"0" [1-9] | [12] [0-9] | "30"'}
DATE = (
    '[1-9] [0-9] [0-9] [0-9] "-" ( ("0" [13578] | "1" [02]) "-" ('
    + DAY[31]
    + ') | ("0" [469] | "11") "-" ('
    + DAY[30]
    + ') | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8]) )'
)
TIME = (
    '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9] [0-9] [0-9])? '
    '("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])'
)

# The converter is loaded from its file, so this process never loads llama.cpp. Where its own
# rules would let a reply break the schema they are replaced: a string's character excludes raw
# control characters (invalid JSON) and escaped surrogate halves (they would miscount lengths),
# a date has the days of its month, literals escape their backslashes, enum and const win.


@cache
def _converter_module():
    """llama-cpp-python's llama_grammar.py, loaded on its own (it imports nothing of the
    package; importing it through the package would load the llama.cpp library here)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("llama-cpp-python is not installed, so a JSON schema cannot be used")
    path = Path(next(iter(spec.submodule_search_locations))) / "llama_grammar.py"
    loader = importlib.util.spec_from_file_location("chatapp_llama_grammar", path)
    if loader is None or loader.loader is None:
        raise GrammarError(f"llama-cpp-python's schema converter is missing ({path})")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def reason(exc: BaseException) -> str:
    """An exception's first line, short and printable."""
    first = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return printable(first[:120])


def array_body(elems: list[str], tail: str | None, low: int, high: int | None) -> str:
    """GBNF for a JSON array of low..high items (None: no most): `elems` the rules of the first
    items in turn (prefixItems), `tail` the rule of the rest (None: there is no rest)."""
    if not elems:
        assert tail is not None
        more = repeat(f'("," space {tail})', max(low - 1, 0), None if high is None else high - 1)
        inner = "" if high == 0 else f"{tail} {more}".strip()
        inner = f"({inner})?" if inner and low == 0 else inner
    else:
        n = len(elems)
        inner = ""
        if tail is not None and (high is None or high > n):
            inner = repeat(
                f'("," space {tail})', max(low - n, 0), None if high is None else high - n
            )
        for i in reversed(range(n if high is None else min(n, high))):
            item = (elems[i] if i == 0 else f'"," space {elems[i]}') + (
                f" {inner}" if inner else ""
            )
            inner = item if i < low else f"({item})?"
    return '"[" space ' + (inner + " " if inner else "") + '"]" space'


_Base: Any = object  # (llama-cpp-python's SchemaConverter, joined in _converter_class)


class SchemaVisit(_Base):
    """A visit that writes what each checked node allows, over the converter's rule
    bookkeeping (`_add_rule`, `_build_object_rule`, ...), naming the place of any node it
    cannot convert."""

    mod: Any  # llama-cpp-python's llama_grammar.py
    rules: dict[str, Any]  # its built-in rules that are replaced here

    def __init__(self, check: SchemaCheck) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self.check = check
        self._refs = check.refs
        self.ref_names: dict[str, str] = {}
        self.made: list[dict] = []  # nodes made here (their ids name places while they live)

    def _format_literal(self, literal):
        return gbnf_literal(literal)

    def _add_primitive(self, name, rule):
        return super()._add_primitive(name, self.rules.get(name, rule))

    def primitive(self, rule_name: str, kind: str) -> str:
        return self._add_rule(rule_name, self._add_primitive(kind, self.mod.PRIMITIVE_RULES[kind]))

    def visit(self, node, name):
        if not name and node is not self.check.clean:
            name = "unnamed"  # (a property named "": "" would take the root's name)
        rule_name = name + "-" if name in self.mod.RESERVED_NAMES else name or "root"
        try:
            return self.node_rule(node, name, rule_name)
        except GrammarError:
            raise
        except CONVERTER_ERRORS as exc:
            where = self.check.where(node)
            raise GrammarError(f"{where} cannot be made into a grammar: {reason(exc)}") from None

    def node_rule(self, node: dict, name: str, rule_name: str) -> str:
        if "$ref" in node:
            return self._add_rule(rule_name, self._resolve_ref(node["$ref"]))
        for key in ("anyOf", "oneOf"):
            if key in node:
                return self._add_rule(rule_name, self._generate_union_rule(name, node[key]))
        if "enum" in node:
            values = " | ".join(self._generate_constant_rule(v) for v in node["enum"])
            return self._add_rule(rule_name, values)
        types = self.check.types.get(id(node), [])
        if len(types) > 1:
            alts = [self.visit(self.branch(node, t), f"{name or 'root'}-{t}") for t in types]
            return self._add_rule(rule_name, " | ".join(alts))
        kind = types[0] if types else "object"  # (any value: an object is written)
        if kind in ("number", "boolean", "null"):
            return self.primitive(rule_name, kind)
        return getattr(self, f"{kind}_rule")(node, name, rule_name)

    def branch(self, node: dict, kind: str) -> dict:
        """One type of a node with several: the keywords about that type."""
        out = {"type": kind, **{k: v for k, v in node.items() if kind in FAMILY.get(k, ())}}
        self.made.append(out)
        self.check.places[id(out)] = self.check.places.get(id(node), ())
        self.check.types[id(out)] = [kind]
        return out

    def integer_rule(self, node: dict, name: str, rule_name: str) -> str:
        if INT_BOUNDS & node.keys():
            return self._add_rule(rule_name, int_range_rule(*int_bounds(node)))
        return self.primitive(rule_name, "integer")

    def string_rule(self, node: dict, name: str, rule_name: str) -> str:
        if "pattern" in node:
            return self._add_rule(rule_name, f'"\\"" {pattern_gbnf(node["pattern"])} "\\"" space')
        fmt = node.get("format")
        if fmt == "uuid":
            return self.primitive(rule_name, "uuid")
        if fmt:
            kind = f"{fmt}-string"
            return self._add_rule(
                rule_name, self._add_primitive(kind, self.mod.STRING_FORMAT_RULES[kind])
            )
        if "minLength" in node or "maxLength" in node:
            char = self._add_primitive("char", self.rules["char"])
            chars = repeat(char, node.get("minLength", 0), node.get("maxLength"))
            return self._add_rule(rule_name, f'"\\"" {chars} "\\"" space'.replace("  ", " "))
        return self.primitive(rule_name, "string")

    def object_rule(self, node: dict, name: str, rule_name: str) -> str:
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        if "properties" not in node and extra in (None, True):
            return self.primitive(rule_name, "object")
        # Keys beyond the properties are left out where there are properties: such a key
        # could repeat one of them (a reply with "age" twice keeps the last).
        required = set(node.get("required", ()))
        body = self._build_object_rule(
            list(props.items()), required, name, None if props else extra
        )
        return self._add_rule(rule_name, body)

    def array_rule(self, node: dict, name: str, rule_name: str) -> str:
        prefix = node.get("prefixItems", [])
        items = node.get("items")
        if not prefix and items is None and not {"minItems", "maxItems"} & node.keys():
            return self.primitive(rule_name, "array")
        sub = f"{name}-" if name else ""
        elems = [self.visit(p, f"{sub}tuple-{i}") for i, p in enumerate(prefix)]
        if items is None:
            tail = self._add_primitive("value", self.mod.PRIMITIVE_RULES["value"])
        else:
            tail = None if items is False else self.visit(items, f"{sub}item")
        low, high = node.get("minItems", 0), node.get("maxItems")
        if tail is None:
            high = len(prefix) if high is None else min(high, len(prefix))
        return self._add_rule(rule_name, array_body(elems, tail, low, high))

    def _resolve_ref(self, ref):
        name = self.ref_names.get(ref)
        if name is None:
            base = "ref-" + self.mod.INVALID_RULE_CHARS_RE.sub("-", ref.rsplit("/", 1)[-1])
            name, i = base, 0
            while name in self._rules or name in self.ref_names.values():
                i += 1
                name = f"{base}{i}"
            self.ref_names[ref] = name  # (a ref inside its own node names it: recursion)
            rule = self.visit(self._refs[ref], name)
            if rule != name:
                self._rules[name] = rule
        return name


@cache
def _converter_class():
    """The converter class: our visit over llama-cpp-python's SchemaConverter."""
    mod: Any = _converter_module()  # llama-cpp-python's file, loaded by path
    rules = {name: mod.BuiltinRule(body, []) for name, body in (("char", CHAR), ("date", DATE))}
    rules["time"] = mod.BuiltinRule(TIME, [])
    return type("Converter", (SchemaVisit, mod.SchemaConverter), {"mod": mod, "rules": rules})


def schema_to_gbnf(schema: dict) -> str:
    """GBNF text for a JSON schema (a dict); GrammarError names a part it cannot convert."""
    if not isinstance(schema, dict):
        raise GrammarError("the JSON schema must be an object ({...}) at its top")
    try:
        check = SchemaCheck(schema)
    except RecursionError:
        raise GrammarError(f"the schema nests deeper than {MAX_DEPTH} levels") from None
    converter = _converter_class()(check)
    try:
        converter.visit(check.clean, "")
    except RecursionError:
        raise GrammarError("the schema refers to itself too deeply to be a grammar") from None
    return converter.format_grammar()
