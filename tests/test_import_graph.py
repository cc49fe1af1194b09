"""The package's import graph reads top-down: no module imports, even inside a function or for type checking
only, a module that imports it back, nor a module of a layer above its own (CONTRIBUTING.md, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tlsearch"

LAYERS = [  # bottom up, as in CONTRIBUTING.md's layer table; a module may import its own layer and those below
    [
        "tlsearch.errors",
        "tlsearch._lazy",
        "tlsearch._renamed",
        "tlsearch._text",
        "tlsearch._files",
        "tlsearch._pickling",
    ],
    ["tlsearch._compat", "tlsearch.seeds", "tlsearch.spaces"],
    ["tlsearch.mongo", "tlsearch.config"],
    ["tlsearch.storage", "tlsearch.data"],
    ["tlsearch.stores"],
    ["tlsearch.models"],
    ["tlsearch.cv"],
    ["tlsearch.spec"],
    ["tlsearch.reading"],
    ["tlsearch.execution"],
    ["tlsearch.cli", "tlsearch.__main__"],
]
OUTSIDE_THE_LAYERS = {"tlsearch", "tlsearch.testing", "tlsearch.testing.mongo_server"}  # lazy by name; test-only


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        if "examples" in path.relative_to(PACKAGE).parts:  # the example studies, linked in from studies/
            continue
        parts = ["tlsearch", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The tlsearch modules `name` imports anywhere in its source (`from tlsearch import x` counts as importing
    the submodule x when there is one, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "tlsearch.seeds" in graph["tlsearch.reading._refit"]  # module level, `from tlsearch import x`
    assert "tlsearch.execution._driver" in graph["tlsearch.cli.study"]  # inside a function
    assert "tlsearch.stores._study_files" in graph["tlsearch.reading._refit"]  # `from tlsearch.stores import _x as x`
    assert "tlsearch.data._store" in graph["tlsearch.data._splitting"]  # `from tlsearch.data._store import ...`


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def layer_of(module: str) -> int:
    for level, tops in enumerate(LAYERS):
        if any(module == top or module.startswith(f"{top}.") for top in tops):
            return level
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to CONTRIBUTING.md's layer table")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} -> {imported}"
        for name, imports in graph.items()
        if name not in OUTSIDE_THE_LAYERS
        for imported in imports
        if imported not in OUTSIDE_THE_LAYERS and layer_of(imported) > layer_of(name)
    )


def test_every_module_is_in_a_layer():
    for name in import_graph():
        if name not in OUTSIDE_THE_LAYERS:
            layer_of(name)


def test_no_import_goes_up_a_layer():
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found():
    assert upward_imports({"tlsearch.cv._evaluate": {"tlsearch.execution._driver", "tlsearch.models"}}) == [
        "tlsearch.cv._evaluate -> tlsearch.execution._driver"
    ]
