"""``import burble`` and ``burble --help`` stay light; the lazy names still resolve."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from burble.cli import COMMANDS, build_parser
from burble.lazy import lazy_exports

PACKAGE = Path(__file__).resolve().parents[1] / "burble"
LAZY_PACKAGES = ("burble", "burble.batch", "burble.asr.fusion")


def torch_loaded_after(code: str) -> bool:
    """Run ``code`` in a fresh interpreter (``--help`` exits: that is fine) and say whether torch got imported."""
    script = f"import contextlib, sys\nwith contextlib.suppress(SystemExit):\n    {code}\nprint('torch loaded:', 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    last = out.stdout.strip().splitlines()[-1]
    assert last in ("torch loaded: True", "torch loaded: False"), out.stdout[-500:]
    return last == "torch loaded: True"


def test_the_probe_sees_torch():
    assert torch_loaded_after("import burble.decoding.generate")
    assert torch_loaded_after("import burble; burble.load_model")  # a lazy name does load its module


@pytest.mark.parametrize(
    "code",
    [
        "import burble, burble.batch, burble.asr.fusion",
        "from burble.cli import main; main(['--help'])",
        *[f"from burble.cli import main; main(['{name}', '--help'])" for name in COMMANDS],
    ],
)
def test_help_and_package_imports_do_not_load_torch(code):
    assert not torch_loaded_after(code), code


def exports_of(package: str) -> dict[str, str]:
    return importlib.import_module(package)._EXPORTS


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_lazy_name_is_the_object_its_module_defines(package):
    """Each exported name resolves through the hook to the very object in the module the table
    names (a stale table entry, a typo or a name moved to another module fails here)."""
    module = importlib.import_module(package)
    exports = exports_of(package)
    assert exports and set(getattr(module, "__all__", exports)) <= set(exports) | set(vars(module))
    for name, where in exports.items():
        vars(module).pop(name, None)  # undo a cache from an earlier lookup, so the hook runs
        assert getattr(module, name) is getattr(importlib.import_module(where), name), f"{package}.{name}"
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_a_wrong_table_fails_on_use_not_silently(tmp_path, monkeypatch):
    """Negative control for the check above: the hook built from a table with a wrong module
    raises instead of returning something, and an unknown name is an AttributeError."""
    (tmp_path / "lazyfake").mkdir()
    (tmp_path / "lazyfake" / "__init__.py").write_text("")
    (tmp_path / "lazyfake" / "real.py").write_text("THING = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    getattr_hook, dir_hook = lazy_exports("lazyfake", {"THING": "lazyfake.real", "GHOST": "lazyfake.real", "LOST": "lazyfake.absent"})
    assert getattr_hook("THING") is importlib.import_module("lazyfake.real").THING
    with pytest.raises(AttributeError):
        getattr_hook("GHOST")  # listed, but the module does not define it
    with pytest.raises(ModuleNotFoundError):
        getattr_hook("LOST")
    with pytest.raises(AttributeError, match="no attribute 'other'"):
        getattr_hook("other")
    assert {"THING", "GHOST", "LOST"} <= set(dir_hook())


def test_importing_a_lazy_package_loads_none_of_its_exports():
    """The point of the hooks: the modules behind the names load on first use, not on import."""
    script = (
        "import sys, importlib\n"
        f"packages = {LAZY_PACKAGES!r}\n"
        "for p in packages: importlib.import_module(p)\n"
        "tables = {p: sys.modules[p]._EXPORTS for p in packages}\n"
        "print(sorted({m for t in tables.values() for m in t.values() if m in sys.modules}))\n"
        "sys.modules['burble.batch'].run_job\n"
        "print('burble.batch.runner' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True"], out


def command_modules() -> set[str]:
    """Modules of burble that follow the command convention: a top-level ``add_parser`` and ``run``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        names = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if {"add_parser", "run"} <= names:
            found.add(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    return found


def test_every_command_module_is_registered_and_available():
    """Every module written as a command is in the CLI's table (one left out would be unreachable),
    and every entry builds a working subcommand, not the 'unavailable' stand-in."""
    assert command_modules() == set(COMMANDS.values())
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(subparsers.choices) == set(COMMANDS)
    for name, parser in subparsers.choices.items():
        assert parser.get_default("unavailable") is None, f"burble {name}: {parser.get_default('unavailable')}"
