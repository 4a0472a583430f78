"""Lazy package exports: a package's public names, imported from their modules on first use.

Each part's ``__init__`` lists its public API (``__all__``, and the names by the submodule
that defines them) and installs
:func:`lazy`'s ``__getattr__``/``__dir__``, so ``import patton.sim`` (or ``patton.hw``, which
would load Amaranth) costs nothing until a name is used, importing one submodule does not
import the whole package, and no import cycle can arise through an ``__init__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy"]


def lazy(package: str, namespace: dict[str, Any], exports: dict[str, tuple[str, ...]],
         names: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for ``package`` exporting ``names``.

    ``exports`` maps each submodule (relative to ``package``) to the public names it defines;
    together they must be ``names`` (the package's ``__all__``). A name, once looked up, is
    stored in ``namespace`` (the package's globals).
    """
    where = {name: module for module, defined in exports.items() for name in defined}
    if sorted(where) != sorted(names):
        raise ImportError(f"{package}: __all__ and the export table disagree on "
                          f"{sorted(set(where) ^ set(names))}")

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
