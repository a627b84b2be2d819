"""The package's shape shows its concepts (issue 25, item 8): no module over
600 lines, only the public modules at the top level, no import cycle among
gdsio's modules (imports at the top and inside functions; those under
TYPE_CHECKING never run and do not count), and at most 10 imports of gdsio
modules inside functions. Read from the source (ast), so nothing here depends
on what imported what. On the tree before b6ceda5 the cycle check names
data/cache.py <-> data/disk_cache.py."""

from __future__ import annotations

import ast
from pathlib import Path

import gdsio

PACKAGE = Path(gdsio.__file__).resolve().parent
MAX_LINES = 600
TOP_LEVEL = {"__init__", "__main__", "config", "device", "errors", "starvation", "tensors"}
MAX_FUNCTION_IMPORTS = 10


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = ("gdsio",) + p.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    out["gdsio._core"] = PACKAGE  # the compiled extension: imports nothing of gdsio's
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import with where it runs: "module" (at import time), "function"
    (when called) or "typing" (under TYPE_CHECKING: never at run time)."""
    found: list[tuple[ast.Import | ast.ImportFrom, str]] = []

    def walk(nodes: list[ast.stmt], where: str) -> None:
        for n in nodes:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                found.append((n, where))
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(n.body, "function")
            elif isinstance(n, ast.If) and _is_type_checking(n):
                walk(n.body, "typing")
                walk(n.orelse, where)
            else:
                for field in ("body", "orelse", "finalbody"):
                    walk([s for s in getattr(n, field, []) if isinstance(s, ast.stmt)], where)
                for h in getattr(n, "handlers", []):
                    walk(h.body, where)

    walk(tree.body, "module")
    return found


def _targets(name: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The gdsio modules an import statement loads (a name imported from a
    package that is itself a module counts as that module)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".") if is_pkg else name.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = set()
    for t in names:
        while t not in modules and "." in t:
            t = t.rsplit(".", 1)[0]
        if t in modules and t != name:
            out.add(t)
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    in_functions = []
    for name, path in modules.items():
        if path.is_dir():
            continue
        for node, where in _imports(ast.parse(path.read_text(), str(path))):
            targets = _targets(name, path.name == "__init__.py", node, modules)
            if where != "typing":  # an import inside a function that closes a cycle is a cycle too
                graph[name] |= targets
            if where == "function" and targets:
                in_functions.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return graph, in_functions


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their concepts: {long}"


def test_the_top_level_holds_the_public_modules_only():
    assert {p.stem for p in PACKAGE.glob("*.py")} == TOP_LEVEL


def test_no_import_cycle():
    graph, _ = _graph()
    # The graph is read right: relative, absolute and package imports are edges.
    assert {"gdsio.transforms.resizing", "gdsio.transforms.images"} <= graph["gdsio.transforms.fused"]
    assert "gdsio._core" in graph["gdsio.transforms.images"]
    assert {"gdsio.io", "gdsio.io.npy_header"} <= graph["gdsio.tensors"]
    assert not _cycles(graph)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_few_gdsio_imports_inside_functions():
    _, in_functions = _graph()
    assert len(in_functions) <= MAX_FUNCTION_IMPORTS, in_functions


def test_no_private_name_crosses_a_module():
    # A name another module uses is public to the package and says so (issue 25):
    # `from .x import _y` is refused; the compiled extension (`_core`) and dunders are not names of this kind.
    modules = _modules()
    found = []
    for name, path in modules.items():
        if path.is_dir() or path.suffix != ".py":
            continue
        for node, _ in _imports(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not _targets(name, path.name == "__init__.py", node, modules):
                continue
            for alias in node.names:
                n = alias.name
                if n.startswith("_") and not n.startswith("__") and n != "_core" and f"{node.module}".split(".")[-1] != n:
                    found.append(f"{name}: from {'.' * node.level}{node.module or ''} import {n}")
    assert not found, found
