"""The import graph, read from the source: no cycle among the project's modules, and `lightning_modules` (what
trains) never imports `ablations` (what organises runs).

Every import statement counts, wherever it stands: at module level, inside a function (a deferred import is a
dependency all the same) and under `if TYPE_CHECKING:`. `from package import name` is an edge to the submodule
`package.name` where there is one, else to the package. Importing a submodule also runs its package's
`__init__.py`, but that implicit edge is not counted: a package's `__init__` may sit on top of its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lightning_modules", "ablations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import statement in the module `name`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a module: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append((target, node.lineno))
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """Module -> the project modules it imports, and where each edge is written (file:line)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    where: dict[tuple[str, str], str] = {}
    for name, path in modules.items():
        for target, line in imports(name, path, modules):
            graph[name].add(target)
            where.setdefault((name, target), f"{path.relative_to(ROOT)}:{line}")
    return graph, where


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The components of mutually reachable modules that hold a cycle (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a path that ends where it starts."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(graph: dict[str, set[str]], where: dict[tuple[str, str], str], component: set[str]) -> str:
    cycle = one_cycle(graph, component)
    steps = "\n".join(f"    {a} -> {b}  ({where[(a, b)]})" for a, b in zip(cycle, cycle[1:]))
    return f"  cycle among {', '.join(sorted(component))}:\n{steps}"


def test_the_graph_is_read_from_every_module():
    graph, where = import_graph()
    assert {"ablations.cli", "ablations.launch.processes", "lightning_modules.transformer"} <= set(graph)
    assert "ablations.records" in graph["ablations.cli"]  # an import inside a function counts
    assert ("ablations.cli", "ablations.records") in where


def test_lightning_modules_never_imports_ablations():
    graph, where = import_graph()
    wrong = sorted(
        (a, b)
        for a in graph
        if a.split(".")[0] == "lightning_modules"
        for b in graph[a]
        if b.split(".")[0] == "ablations"
    )
    assert not wrong, "lightning_modules imports ablations:\n" + "\n".join(
        f"  {a} -> {b}  ({where[(a, b)]})" for a, b in wrong
    )


def test_no_import_cycles():
    graph, where = import_graph()
    components = strongly_connected(graph)
    assert not components, "import cycles:\n" + "\n".join(describe(graph, where, c) for c in components)
