"""Static checks on a package's own imports: cycles, and library code importing test helpers.

The walk reads source with :mod:`ast`; nothing is imported. Two kinds of import are told apart:

- *module-level* imports run when the module is first imported (top level, class bodies, ``try``
  and ordinary ``if`` blocks). Only these can form an import cycle that breaks ``import x``, so only
  these count for cycles;
- *deferred* imports, inside functions or under ``if TYPE_CHECKING:``, never run at import time
  (or never at all). They still count for the layering rule: library code that imports the test
  helpers in a function still needs them installed and still points the wrong way.

:func:`import_in_fresh_process` is the dynamic check beside the static one: it imports modules in
a given order in a new interpreter and reports how each import went.

Used by ``tests/test_imports.py``; a user can run it on their own package too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence


@dataclass(frozen=True)
class ImportEdge:
    """One import of a module of the package by another.

    Attributes:
      source: the importing module (dotted name).
      target: the imported module of the package (dotted name).
      line: the line of the import statement in ``source``.
      module_level: whether it runs when ``source`` is imported (see the module docstring).
    """

    source: str
    target: str
    line: int
    module_level: bool


@dataclass
class ImportGraph:
    """The package's internal imports.

    Attributes:
      package: the top-level package name (e.g. ``"burble"``).
      modules: dotted module name -> its source file.
      edges: every import of one of ``modules`` by another.
    """

    package: str
    modules: dict[str, Path]
    edges: list[ImportEdge] = field(default_factory=list)

    def targets(self, include_deferred: bool = False) -> dict[str, set[str]]:
        """module -> the package modules it imports at module level (the graph that import cycles
        break in), or with ``include_deferred`` every module it imports anywhere (the layering)."""
        targets: dict[str, set[str]] = {name: set() for name in self.modules}
        for edge in self.edges:
            if (edge.module_level or include_deferred) and edge.target != edge.source:
                targets[edge.source].add(edge.target)
        return targets


def module_name(package_dir: Path, path: Path) -> str:
    """Dotted name of ``path`` inside the package rooted at ``package_dir`` (``__init__`` -> the package)."""
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package rooted at ``package_dir``, by dotted name, sorted."""
    found = {module_name(package_dir, p): p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts}
    return dict(sorted(found.items()))


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _walk_imports(node: ast.AST, module_level: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node``, with whether it runs at import time."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, module_level
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk_imports(child, False)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield from _walk_imports(ast.Module(body=[statement], type_ignores=[]), False)
            for statement in child.orelse:  # the else branch does run
                yield from _walk_imports(ast.Module(body=[statement], type_ignores=[]), module_level)
        else:
            yield from _walk_imports(child, module_level)


def _base_of_relative(source: str, is_package: bool, level: int) -> str:
    """The package a relative import of ``level`` dots in module ``source`` starts from."""
    parts = source.split(".")
    if not is_package:
        parts.pop()  # a plain module's "." is its parent package
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts)


def _targets(
    statement: ast.Import | ast.ImportFrom, source: str, is_package: bool, modules: dict[str, Path]
) -> list[str]:
    """The package modules one import statement loads (names of other packages are dropped)."""
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names if alias.name in modules]
    base = statement.module or ""
    if statement.level:
        prefix = _base_of_relative(source, is_package, statement.level)
        base = f"{prefix}.{base}" if base else prefix
    found = []
    for alias in statement.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules:  # ``from pkg import module`` loads that module
            found.append(submodule)
        elif base in modules:  # ``from module import name``
            found.append(base)
    return sorted(set(found))


def build_import_graph(package_dir: Path) -> ImportGraph:
    """Parse every module of the package rooted at ``package_dir`` and collect its internal imports."""
    package_dir = Path(package_dir).resolve()
    modules = package_modules(package_dir)
    graph = ImportGraph(package=package_dir.name, modules=modules)
    for source, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for statement, module_level in _walk_imports(tree, True):
            for target in _targets(statement, source, is_package, modules):
                graph.edges.append(ImportEdge(source, target, statement.lineno, module_level))
    return graph


def strongly_connected_components(targets: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (no recursion limit on deep graphs); components sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(targets):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(targets[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(targets.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def _cycle_through(component: Sequence[str], targets: dict[str, set[str]]) -> list[str]:
    """One concrete cycle inside a strongly connected component, for the message (BFS, shortest)."""
    members = set(component)
    start = component[0]
    previous: dict[str, Optional[str]] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(targets[node] & members):
            if child == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path)) + [start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return list(component)


def import_cycles(graph: ImportGraph, include_deferred: bool = False) -> list[list[str]]:
    """Each import cycle as ``[a, b, ..., a]``, one per strongly connected component.

    Args:
      graph: the package's imports.
      include_deferred: also follow deferred imports. Such a cycle cannot break ``import x``,
        but it shows modules that depend on each other, i.e. layering that does not point down.
    """
    targets = graph.targets(include_deferred)
    return [_cycle_through(c, targets) for c in strongly_connected_components(targets) if len(c) > 1]


def forbidden_imports(graph: ImportGraph, forbidden: str, allowed_inside: Optional[str] = None) -> list[ImportEdge]:
    """Imports of ``forbidden`` (or its submodules) from modules outside ``allowed_inside``.

    Deferred imports count too (see the module docstring).
    """
    allowed_inside = forbidden if allowed_inside is None else allowed_inside

    def within(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    return [e for e in graph.edges if within(e.target, forbidden) and not within(e.source, allowed_inside)]


def import_problems(package_dir: Path, test_helpers: str) -> list[str]:
    """Every cycle and every library import of ``test_helpers``, one readable line each."""
    graph = build_import_graph(package_dir)
    problems = [f"import cycle: {' -> '.join(cycle)}" for cycle in import_cycles(graph)]
    for edge in forbidden_imports(graph, test_helpers):
        where = "at module level" if edge.module_level else "deferred"
        problems.append(f"library imports {test_helpers}: {edge.source} line {edge.line} imports {edge.target} ({where})")
    return problems


# The child interpreter: import each module in the order given, report one JSON object per module.
_IMPORT_SCRIPT = """
import importlib, json, sys, traceback
results = {}
for name in json.loads(sys.stdin.read()):
    try:
        importlib.import_module(name)
        results[name] = {"outcome": "ok"}
    except ModuleNotFoundError as error:
        results[name] = {"outcome": "missing", "missing": error.name or "", "error": repr(error)}
    except BaseException as error:
        results[name] = {"outcome": "error", "error": "".join(traceback.format_exception_only(error)).strip()}
print("IMPORT-RESULTS " + json.dumps(results))
"""


@dataclass(frozen=True)
class ImportOutcome:
    """How importing one module went.

    Attributes:
      outcome: ``"ok"``, ``"missing"`` (a ``ModuleNotFoundError``) or ``"error"`` (anything else).
      missing: for ``"missing"``, the dotted name that could not be found.
      error: the exception, one line (empty when ``ok``).
    """

    outcome: str
    missing: str = ""
    error: str = ""


def import_in_fresh_process(
    modules: Sequence[str], *, search_path: Sequence[Path] = (), timeout: float = 300.0
) -> dict[str, ImportOutcome]:
    """Import ``modules`` one after another, in this order, in a new Python interpreter.

    Every module is attempted even after one fails, so one run shows every failure for the order.

    Args:
      modules: dotted names, in import order.
      search_path: folders put first on the child's ``sys.path`` (e.g. where a package lives).
      timeout: seconds before the child is killed.
    """
    env_path = [str(Path(p).resolve()) for p in search_path]
    script = f"import sys; sys.path[:0] = {env_path!r}\n" + _IMPORT_SCRIPT
    done = subprocess.run(
        [sys.executable, "-c", script], input=json.dumps(list(modules)), capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("IMPORT-RESULTS ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the import run crashed (exit {done.returncode}): {done.stderr[-2000:]}")
    raw = json.loads(lines[-1].removeprefix("IMPORT-RESULTS "))
    return {name: ImportOutcome(**fields) for name, fields in raw.items()}
