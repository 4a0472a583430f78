"""Read a counterexample trace: the value of each named signal in each step of a VCD file.

SymbiYosys (smtbmc) writes one VCD time stamp per step and the step number in the integer
variable ``smt_step``. :func:`steps` returns, for each step in order, the values of the
signals asked for by their dotted path below the top module (``"valid"``,
``"checker.violated"``); values are integers (``x``/``z`` bits read as 0).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["steps"]


def steps(path: str | os.PathLike[str], names: Iterable[str]) -> list[dict[str, int]]:
    """Return ``[{name: value}, ...]``, one dict per step, for the signals ``names``.

    Raises
    ------
    KeyError
        If a name is not a signal of the trace.
    """
    wanted = list(names)
    codes: dict[str, str] = {}  # identifier code -> dotted name
    scope: list[str] = []
    values: dict[str, int] = {}
    by_step: dict[int, dict[str, int]] = {}
    step_code = None
    step = 0
    started = False
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            head = words[0]
            if not started:
                if head == "$scope":
                    scope.append(words[2])
                elif head == "$upscope":
                    scope.pop()
                elif head == "$var" and words[4] == "smt_step":
                    step_code = words[3]
                elif head == "$var":
                    dotted = ".".join(scope[1:] + [words[4]])
                    if dotted in wanted:
                        codes[words[3]] = dotted
                elif head == "$enddefinitions":
                    missing = set(wanted) - set(codes.values())
                    if missing:
                        raise KeyError(f"{path}: no signal {sorted(missing)}")
                    started = True
                continue
            if head.startswith(("#", "$")):
                continue
            if head[0] in "bB":
                code, bits = words[1], head[1:]
            else:
                code, bits = head[1:], head[0]
            value = int(bits.replace("x", "0").replace("z", "0"), 2) if bits[0] in "01xz" else 0
            if code == step_code:
                step = value
            elif code in codes:
                values[codes[code]] = value
            by_step[step] = dict(values)
    return [{name: by_step[k].get(name, 0) for name in wanted} for k in sorted(by_step)]
