"""Lazy package exports (PEP 562): a package's public names are imported on first use.

``import burble`` and the CLI's ``--help`` should not pay seconds for importing torch, yet
``from burble.batch import run_job`` should keep working. A package lists ``name -> module``
and installs the two module hooks this returns.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
      package: the package's ``__name__``.
      exports: public name -> the module that defines it.

    Returns:
      ``(__getattr__, __dir__)``, to assign at the package's module level.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(exports))

    return __getattr__, __dir__
