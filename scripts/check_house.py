"""The house's size and boundary rules over chatapp/: prints each break, exits 1 if any."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_FUNCTION_LINES = 60  # the def line to the last line, decorators not counted
MAX_MODULE_LINES = 400
MAX_CLASS_METHODS = 30  # defs directly in the class body
PROBES = ("hasattr", "getattr", "callable")
SERVER_KINDS = ("llama-server", "vllm", "ollama", "llama-cpp-python", "openai")
FLAVOURS = Path("chatapp/engine/remote/flavours.py")


@dataclass(frozen=True)
class Break:
    """One rule broken: where, and what."""

    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def sizes(path: Path, tree: ast.Module, source: str) -> Iterator[Break]:
    """Modules over MAX_MODULE_LINES, functions over MAX_FUNCTION_LINES, classes with more
    than MAX_CLASS_METHODS methods."""
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        yield Break(path, 1, f"module of {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield Break(path, node.lineno, f"function {node.name} of {length} lines")
        elif isinstance(node, ast.ClassDef):
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if methods > MAX_CLASS_METHODS:
                yield Break(path, node.lineno, f"class {node.name} with {methods} methods")


def _names_an_engine(node: ast.expr) -> bool:
    """Whether an expression reads as an engine: `engine`, `self.engine`, `slot.engine`..."""
    text = ast.unparse(node).lower()
    return "engine" in text


def engine_probes(path: Path, tree: ast.Module) -> Iterator[Break]:
    """hasattr / getattr / callable applied to an engine outside chatapp/engine/: an engine's
    abilities are its declared Capabilities."""
    if path.parts[:2] == ("chatapp", "engine"):
        return
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in PROBES
            and node.args
            and (_names_an_engine(node.args[0]) or any(map(_names_an_engine, node.args[1:2])))
        ):
            yield Break(path, node.lineno, f"{node.func.id}() probes an engine: ask .capabilities")


def server_kinds(path: Path, tree: ast.Module) -> Iterator[Break]:
    """A kind compared with a server's name outside the flavour table (chatapp/models is
    left out: there "ollama" names a store of model files, not a server)."""
    if path == FLAVOURS or path.parts[:2] == ("chatapp", "models"):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and "kind" in ast.unparse(node):
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                for value in values:
                    if isinstance(value, ast.Constant) and value.value in SERVER_KINDS:
                        yield Break(
                            path, node.lineno, f"compares with {value.value!r}: use the flavour"
                        )


def check(root: Path) -> list[Break]:
    """Every break of the rules in root/chatapp, paths relative to root."""
    found: list[Break] = []
    for file in sorted((root / "chatapp").rglob("*.py")):
        path = file.relative_to(root)
        source = file.read_text(encoding="utf-8")
        tree = ast.parse(source, str(path))
        found += [*sizes(path, tree, source), *engine_probes(path, tree)]
        found += server_kinds(path, tree)
    return found


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    found = check(root)
    for item in found:
        print(item)
    print(f"{len(found)} breaks" if found else "the house holds its rules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
