"""A pytest plugin that runs the tests on a mutant: one module's source with one edit.

``PATTON_MUTANT`` holds ``{"module": ..., "old": ..., "new": ...}`` (JSON): before any test
is collected, the module is loaded from its file with the one occurrence of ``old`` replaced
by ``new`` (neither the file nor the working tree changes, so tests running beside it see
the real code). :func:`run` starts such a pytest: ``tests/test_mutants.py`` (the mutants
CI requires caught) and ``benchmarks/mutation_score.py`` (a module's mutation score) call it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent


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


def run(module: str, old: str, new: str, tests: Sequence[str | Path],
        marks: str | None = None) -> subprocess.CompletedProcess:
    """``pytest -x TESTS [-m MARKS]`` in a process of its own, on the mutant of ``module`` with
    ``old`` replaced by ``new``. Exit status 1: a test failed (the mutant is killed); 0: every
    test passed; another: pytest could not run (the output says why, e.g. the edit is not in
    the source)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PATTON_MUTANT=json.dumps({"module": module, "old": old, "new": new}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n0", "-p", "mutate",
                           "-p", "no:cacheprovider", *(["-m", marks] if marks else []),
                           *map(str, tests)],
                          capture_output=True, text=True, cwd=TESTS.parent, env=env,
                          timeout=1800)


def pytest_configure(config) -> None:
    edit = os.environ.get("PATTON_MUTANT")
    if edit:
        load(**json.loads(edit))
