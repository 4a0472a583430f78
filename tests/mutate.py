"""A pytest plugin that runs the tests on a mutant: one module's source with one edit.

``PATTON_MUTANT`` holds ``{"module": ..., "old": ..., "new": ...}`` (JSON): before any test
is collected, the module is loaded from its file with the one occurrence of ``old`` replaced
by ``new`` (neither the file nor the working tree changes, so tests running beside it see
the real code). ``tests/test_mutants.py`` starts ``pytest -p mutate`` with it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys


def load(module: str, old: str, new: str) -> None:
    """Put the mutant of ``module`` in ``sys.modules`` (and on its package), in place of the
    real one; refuse an edit that does not occur exactly once."""
    if module in sys.modules:
        raise RuntimeError(f"{module} is imported already; the mutant would not be seen")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"no module {module}")
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    if source.count(old) != 1:
        raise RuntimeError(f"{spec.origin}: {old!r} occurs {source.count(old)} times, not once")
    mutant = importlib.util.module_from_spec(spec)
    sys.modules[module] = mutant
    exec(compile(source.replace(old, new), spec.origin, "exec"), mutant.__dict__)
    package, _, name = module.rpartition(".")
    setattr(sys.modules[package], name, mutant)


def pytest_configure(config) -> None:
    edit = os.environ.get("PATTON_MUTANT")
    if edit:
        load(**json.loads(edit))
