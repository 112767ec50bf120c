"""The shape of the product code: modules a reader can hold in mind, and imports without cycles.

import-linter (``lint-imports``, in ``make test``) keeps the layers pointing one way: between the
apps, and inside each app. This file checks what it does not: that no two modules import each
other by any path (a cycle makes the import order decide what works), and the sizes issue 26 set
(a module of product code stays under about 500 lines, a function under about 80). Generated
migrations are not product code a reader edits, and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
PACKAGES = ("formation", "messages_app", "search_app", "audit_app", "synthetic")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (PROJECT_DIR / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_by_any_path():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    modules = {name for name in graph.modules if ".migrations" not in name}
    edges = {
        name: {
            imported
            for imported in graph.find_modules_directly_imported_by(name)
            if imported in modules
        }
        for name in modules
    }
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "path", product_modules(), ids=lambda path: str(path.relative_to(PROJECT_DIR))
)
def test_a_module_stays_readable(path: Path):
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    long_functions = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long_functions == []
