"""burble's imports form a DAG, library code never imports burble.testing, and every module
imports in any order in a fresh interpreter.

Each check is first run on a tiny fake package with the faults planted (a cycle, a test-helper
import, deferred imports that must not count as cycles), so a walker that misses them fails here.
"""

from __future__ import annotations

import random
import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from burble.testing.imports import (
    ImportEdge,
    ImportOutcome,
    build_import_graph,
    forbidden_imports,
    import_cycles,
    import_in_fresh_process,
    import_problems,
    package_modules,
    strongly_connected_components,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "burble"
# The entry point runs the CLI when imported: it is a script, not a module to import.
NOT_IMPORTABLE = {"burble.__main__": "burble/__main__.py runs the CLI on import"}
MODULES = [m for m in package_modules(PACKAGE) if m not in NOT_IMPORTABLE]
SEEDS = (0, 1, 2)

FAKE_PACKAGE = {
    "__init__.py": "",
    # a -> b -> c -> a at module level; c needs a name a defines after its import, so the cycle
    # also really breaks when a is imported first.
    "a.py": "from fakepkg import b\nfrom fakepkg import deferred, typed\nA = 1\n",
    "b.py": "from . import c\n",
    "c.py": "from fakepkg.a import A\n",
    # These import a too, but only in a function or for type checkers: no cycle.
    "deferred.py": "def f():\n    import fakepkg.a\n    return fakepkg.a.A\n",
    "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fakepkg.a import A\nelse:\n    import json\n",
    # Test helpers may import the library, and the library must not import them (even deferred).
    "testing/__init__.py": "",
    "testing/helpers.py": "import fakepkg.deferred\nHELP = 1\n",
    "lib_deferred.py": "def f():\n    from fakepkg.testing import helpers\n    return helpers.HELP\n",
    "sub/__init__.py": "",
    "sub/lib_relative.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..testing.helpers import HELP\n",
    "clean.py": "import fakepkg.deferred\nimport os\n",
}


@pytest.fixture
def fake_package(tmp_path: Path) -> Path:
    root = tmp_path / "fakepkg"
    for relative, text in FAKE_PACKAGE.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# -- the walker on planted faults ---------------------------------------------------------------


def test_walker_finds_the_planted_cycle_and_only_it(fake_package):
    graph = build_import_graph(fake_package)
    assert import_cycles(graph) == [["fakepkg.a", "fakepkg.b", "fakepkg.c", "fakepkg.a"]]
    # The deferred imports of a (in deferred.py's function, under typed.py's TYPE_CHECKING) join
    # the cycle only when asked for; typed.py's else branch runs, so its json import is kept.
    components = strongly_connected_components(graph.targets(include_deferred=True))
    assert ["fakepkg.a", "fakepkg.b", "fakepkg.c", "fakepkg.deferred", "fakepkg.typed"] in components
    assert [e for e in graph.edges if e.source == "fakepkg.typed"] == [ImportEdge("fakepkg.typed", "fakepkg.a", 3, False)]


def test_walker_finds_every_library_import_of_the_test_helpers(fake_package):
    graph = build_import_graph(fake_package)
    found = {(e.source, e.target, e.module_level) for e in forbidden_imports(graph, "fakepkg.testing")}
    assert found == {
        ("fakepkg.lib_deferred", "fakepkg.testing.helpers", False),  # inside a function
        ("fakepkg.sub.lib_relative", "fakepkg.testing.helpers", False),  # relative, TYPE_CHECKING
    }
    problems = import_problems(fake_package, "fakepkg.testing")
    assert len(problems) == 3 and problems[0].startswith("import cycle: fakepkg.a -> ")


def test_fresh_process_import_catches_the_planted_cycle(fake_package):
    # Entering the cycle at a breaks (c wants A before a defined it); entering at c works.
    broken = import_in_fresh_process(["fakepkg.a"], search_path=[fake_package.parent])
    assert broken["fakepkg.a"].outcome == "error" and "partially initialized" in broken["fakepkg.a"].error
    fine = import_in_fresh_process(["fakepkg.c", "fakepkg.a"], search_path=[fake_package.parent])
    assert all(o.outcome == "ok" for o in fine.values()), fine
    missing = import_in_fresh_process(["fakepkg.nothing_here"], search_path=[fake_package.parent])["fakepkg.nothing_here"]
    assert (missing.outcome, missing.missing) == ("missing", "fakepkg.nothing_here")


# -- burble itself ------------------------------------------------------------------------------


def test_burble_has_no_import_cycle():
    cycles = import_cycles(build_import_graph(PACKAGE))
    assert not cycles, "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_library_code_never_imports_burble_testing():
    bad = forbidden_imports(build_import_graph(PACKAGE), "burble.testing")
    assert not bad, "\n".join(f"{e.source} line {e.line} imports {e.target}" for e in bad)


def test_the_walker_sees_all_of_burble():
    graph = build_import_graph(PACKAGE)
    assert {"burble", "burble.asr.whisper.model", "burble.testing.imports"} <= set(graph.modules)
    # Cross-check against plain text: every unindented import of a burble module is a module-level
    # edge at that line (a walker that dropped or misfiled imports would miss some).
    top_level = re.compile(r"^(from (burble[\w.]*|\.+[\w.]*) import |import burble)")
    checked = 0
    for name, path in graph.modules.items():
        edge_lines = {e.line for e in graph.edges if e.source == name and e.module_level}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if top_level.match(line) and not line.startswith("from __future__"):
                assert number in edge_lines, f"{path}:{number} {line!r} is not a module-level edge"
                checked += 1
    assert checked > 100
    # The CLI imports its commands by name through importlib: invisible to ast, and not a cycle.
    assert "burble.commands.transcribe" not in graph.targets(include_deferred=True)["burble.cli"]


def optional_imports() -> set[str]:
    """Top-level import names of pyproject's optional dependencies (``piper-tts`` -> ``piper``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = set()
    for requirements in project["optional-dependencies"].values():
        for requirement in requirements:
            dist = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("-", "_")
            if dist != "burble":
                names.add(dist)
    return names


def is_optional(missing: str) -> bool:
    top = missing.split(".")[0].lower()
    return any(dist == top or dist.startswith(top + "_") for dist in optional_imports())


@pytest.fixture(scope="module")
def shuffled_imports() -> dict[int, dict[str, ImportOutcome]]:
    """Per seed: every burble module imported in a shuffled order in one fresh interpreter."""
    runs = {}
    for seed in SEEDS:
        order = list(MODULES)
        random.Random(seed).shuffle(order)
        runs[seed] = import_in_fresh_process(order, search_path=[ROOT])
    return runs


def test_optional_dependency_names():
    assert {"ray", "kenlm", "matplotlib", "faster_whisper", "piper_tts"} <= optional_imports()
    assert is_optional("ray.data") and is_optional("piper") and not is_optional("torch")


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_in_any_order(module, shuffled_imports):
    outcomes = {seed: run[module] for seed, run in shuffled_imports.items()}
    errors = {seed: o.error for seed, o in outcomes.items() if o.outcome == "error"}
    assert not errors, f"import {module} failed (seed: error): {errors}"
    missing = {o.missing for o in outcomes.values() if o.outcome == "missing"}
    if missing and all(is_optional(m) for m in missing):
        pytest.skip(f"optional dependency not installed: {', '.join(sorted(missing))}")
    assert not missing, f"import {module} needs {missing}, which is not an optional dependency"
