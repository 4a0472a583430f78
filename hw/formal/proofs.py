"""The channel's formal proofs: each harness, its configuration, its mode and bound.

:data:`PROOFS` lists every proof ``patton hw prove`` and ``tests/hw/test_formal.py`` run;
:func:`prove` runs some of them; :func:`mutant` is the deliberately broken timing checker
whose proof must fail. ``docs/verification.md`` explains the properties, bounds and the
reductions.

:func:`proofs` gives the proofs of the channel on a device extension set: :data:`PROOFS` on
``aim`` (the default device); on another set the timing and protocol proofs are made on that
set's channel instead, named with the set's suffix (``timing-aimsim-0f28a07+wr16``,
``protocol+wr16``, ``protocol-small+wr16``), and the storage proofs (global buffer, mats, row
buffer), which no extension changes, are kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from patton.hw.formal.protocol import ProtocolProperty
from patton.hw.formal.sby import Outcome, run
from patton.hw.formal.storage import (
    GlobalBufferProperty,
    MatInitProperty,
    MatProperty,
    RowBufferProperty,
)
from patton.hw.formal.timing import TimingProperty, off_by_one
from patton.hw.isa import hw_isa
from patton.hw.params import ChannelParams
from patton.sim.device import DEVICE
from patton.sim.timing import DEFAULT_PROFILE, PROFILES, TIMING, timing_table

__all__ = [
    "FEW_ROWS",
    "FULL",
    "MUTANT_RULE",
    "PROOFS",
    "SMALL",
    "Proof",
    "by_name",
    "mutant",
    "proofs",
    "prove",
]

#: The channel as built (16 banks in 4 groups, 16 lanes, 64 columns, 64 GB columns).
FULL = ChannelParams()
#: The same organisation with 4 rows per bank (the mats' and the row checks' depth).
FEW_ROWS = ChannelParams(rows=4, device=DEVICE.with_(rows=4))
#: 4 banks in 2 groups, 4 lanes, 4 rows, 4 columns, 2 global-buffer columns.
SMALL = ChannelParams(rows=4, device=DEVICE.with_(bankgroups=2, banks_per_group=2,
                                                 column_bytes=8, rows=4, columns=4,
                                                 gb_columns=2))


@dataclass(frozen=True)
class Proof:
    """One SymbiYosys run.

    Members:
        name: its name (the run folder).
        build: returns the harness.
        mode: ``prove`` (base case from reset plus k-induction: every reachable state) or
            ``bmc`` (every command sequence of ``depth`` cycles from reset).
        depth: the bound (``prove``: the base case and the induction length).
        config: the organisation it is proved on, in words.
        claim: what it proves, in words.
    """

    name: str
    build: Callable[[], object]
    mode: str
    depth: int
    config: str
    claim: str

    def run(self, out: str | os.PathLike[str], **kwargs) -> Outcome:
        """Run the proof in ``out/<name>``; return the outcome."""
        return run(self.build(), self.name, mode=self.mode, depth=self.depth, out=out,
                   **kwargs)


def _describe(p: ChannelParams) -> str:
    return (f"{p.banks} banks in {p.bankgroups} groups, {p.lanes} lanes, {p.rows} rows, "
            f"{p.columns} columns, {p.gb_columns} GB columns")


_TIMING = ("flags command F after P iff the table's gap for (P, F) at the node is not met, "
           "for every rule, node and history (verify's algorithm as reference)")

#: Name prefixes of the proofs of the timing checker and the decoder, which an extension
#: changes.
_CHANNEL = ("timing-", "protocol")


def _channel_proofs(ext: str) -> tuple[Proof, ...]:
    """The timing and protocol proofs of the channel on extension set ``ext`` (named with its
    suffix, none on ``aim``: then they are :data:`PROOFS`' own, claims included)."""
    suffix = ext.removeprefix(TIMING.ext)
    on = f" on {ext}" if suffix else ""
    added = "".join(f", {c.name}" for c in hw_isa(ext).commands if c not in TIMING.commands)
    return (
        *(Proof(f"timing-{profile}{suffix}",
                lambda profile=profile: TimingProperty(FULL, timing_table(profile, ext)),
                "prove", 4, _describe(FULL), f"timing checker ({profile}{on}): {_TIMING}")
          for profile in PROFILES),
        Proof(f"protocol{suffix}",
              lambda: ProtocolProperty(FEW_ROWS, timing=timing_table(None, ext)), "prove", 3,
              _describe(FEW_ROWS),
              "decoder: the protocol code of sim.protocol.RULES for every command (EWMUL16, "
              f"AF16, RDAF16{added} included) and state, LUT rows included; a refused command "
              "changes no bank state or mode and writes no mat or GB column; a legal one makes "
              f"its rule's row state{on}"),
        Proof(f"protocol-small{suffix}",
              lambda: ProtocolProperty(SMALL, timing=timing_table(None, ext)), "prove", 3,
              _describe(SMALL),
              f"the same on an organisation whose row and GB column ranges differ{on}"),
    )


#: Every proof, in the order they run.
PROOFS: tuple[Proof, ...] = (
    *_channel_proofs(TIMING.ext),
    Proof("gb-watched", lambda: GlobalBufferProperty(FULL, reads="watched"), "prove", 3,
          _describe(FULL), "global buffer: the watched column always holds the last word "
          "written to it, lane by lane (read in every cycle)"),
    Proof("gb-any", lambda: GlobalBufferProperty(FULL), "bmc", 4, _describe(FULL),
          "global buffer: a read of any column returns the last word written there "
          "(write-first), any reads and writes between"),
    Proof("mat-watched", lambda: MatProperty(FEW_ROWS, reads="watched"), "prove", 3,
          _describe(FEW_ROWS), "mat: the watched word (a normal or a LUT row) always holds "
          "the last word written to it, lane by lane, and its power-up contents in lanes never "
          "written (read in every cycle)"),
    Proof("mat-init", lambda: MatInitProperty(FEW_ROWS), "bmc", 2, _describe(FEW_ROWS),
          "mat power-up contents: any word of a normal row reads as zero, any word of LUT "
          "row k as the default table of AFM k (sim.datapath.af_lut)"),
    Proof("row-buffer", lambda: RowBufferProperty(FEW_ROWS), "bmc", 4, _describe(FEW_ROWS),
          "bank row buffer: a read of the open row (a normal or a LUT row) returns the last "
          "word written to that (row, column); ACT/PRE set the open-row register"),
)

#: The rule the broken checker gets wrong: nRRDS (ACT -> ACT in a channel, 5 cycles).
MUTANT_RULE = 27


def mutant(delta: int = -1, rule: int = MUTANT_RULE) -> Proof:
    """Return the timing proof of a checker whose rule ``rule`` has its gap off by ``delta``.

    The specification stays :data:`~patton.sim.timing.DEFAULT_PROFILE`; the base case runs
    long enough (8 cycles) for the counterexample, an ACT then an ACT ``gap - 1`` (``delta``
    -1) or ``gap`` (``delta`` +1) cycles later.
    """
    table = off_by_one(DEFAULT_PROFILE, rule, delta)
    return Proof(f"mutant-rule{rule}{delta:+d}",
                 lambda: TimingProperty(FULL, DEFAULT_PROFILE, checker_timing=table),
                 "prove", 8, _describe(FULL),
                 f"a checker with rule {rule}'s gap {delta:+d} cycle fails the timing proof")


@cache
def proofs(ext: str | None = None) -> tuple[Proof, ...]:
    """Return the proofs of the channel on device extension set ``ext`` (default ``aim``:
    :data:`PROOFS`), in the order they run: the timing and protocol proofs on that set's
    channel, then the storage proofs, which are the same on every set.

    Raises:
        UnknownExtensionError: ``ext`` is not an extension set.
    """
    ext = timing_table(None, ext).ext
    if ext == TIMING.ext:
        return PROOFS
    storage = tuple(p for p in PROOFS if not p.name.startswith(_CHANNEL))
    return _channel_proofs(ext) + storage


def by_name(name: str, ext: str | None = None) -> Proof:
    """Return the proof called ``name`` among :func:`proofs` of ``ext`` (``KeyError`` naming
    the choices if none is)."""
    chosen = proofs(ext)
    for proof in chosen:
        if proof.name == name:
            return proof
    raise KeyError(f"no proof {name!r}; choose one of: " + ", ".join(p.name for p in chosen))


def prove(out: str | os.PathLike[str], names: Iterable[str] | None = None,
          ext: str | None = None) -> list[Outcome]:
    """Run the proofs ``names`` (default: all of :func:`proofs` of ``ext``, :data:`PROOFS` on
    ``aim``) under ``out``."""
    chosen = proofs(ext) if names is None else [by_name(n, ext) for n in names]
    return [proof.run(out) for proof in chosen]
