"""PATTON and its ablations as one variant configuration (§5.4).

A :class:`Variant` says which of PATTON's mechanisms a runtime keeps; every variant is the
same :class:`~patton.runtime.patton.lifecycle.Runtime` behind the same interface:

``commit_zone``
    partial Value blocks staged in the Commit Zone and committed to their O1V when full
    (:attr:`WriteMode.PATTON`), or written straight to their O1V (:attr:`WriteMode.NO_CZ`);
``token_op``
    how a runtime without the Commit Zone writes one Value token into its O1V: ``"abk"`` (one
    ``WR_ABK`` per Value row: fewest commands and cycles) or ``"mem"`` (one masked ``W MEM``
    per bank and Value row, as the paper describes); a Commit Zone runtime ignores it;
``o2v``
    Order-2 Value granules of ``n_o1p2`` O1Vs shared by requests, or (False) every request
    owning whole VRSs (an O2V as wide as a VRS).

:data:`VARIANTS` names the paper's: ``patton``, ``patton-wo-cz`` (Fig. 8) and
``patton-no-o2v`` (Fig. 9). Other combinations are made with ``dataclasses.replace`` (the
value-write benchmark's ``patton-wo-cz`` with ``token_op="mem"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from patton.runtime.errors import ConfigError
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import TOKEN_OPS, Runtime
from patton.runtime.patton.metadata import WriteMode
from patton.sim.extensions import DEFAULT_EXT

__all__ = ["Variant", "VARIANTS", "variant"]


@dataclass(frozen=True, slots=True)
class Variant:
    """Which of PATTON's mechanisms a runtime keeps (see the module).

    Invariant: ``token_op`` is one of :data:`TOKEN_OPS`.
    """

    name: str
    commit_zone: bool = True
    token_op: str = "abk"
    o2v: bool = True

    def __post_init__(self) -> None:
        if self.token_op not in TOKEN_OPS:
            raise ConfigError(f"variant {self.name!r}: token_op {self.token_op!r} is not one "
                              f"of {', '.join(TOKEN_OPS)}")

    @property
    def mode(self) -> WriteMode:
        """The runtime's write mode."""
        return WriteMode.PATTON if self.commit_zone else WriteMode.NO_CZ

    def config(self, config: Config) -> Config:
        """``config`` with this variant's granules (no O2V: an O2V is a whole VRS)."""
        return config if self.o2v else dataclasses.replace(config,
                                                           o2v_blocks=config.device.columns)

    def runtime(self, config: Config, device_ext: str = DEFAULT_EXT) -> Runtime:
        """A fresh runtime of this variant on ``config``'s geometry, for a device of extension
        set ``device_ext`` (:class:`~patton.runtime.patton.lifecycle.Runtime`: only the
        single-token Value writes into CZ slots, and the no-CZ ones of ``token_op="abk"``,
        depend on it)."""
        return Runtime(self.config(config), self.mode, token_op=self.token_op,
                       device_ext=device_ext)


#: The paper's variants by name.
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("patton"),
    Variant("patton-wo-cz", commit_zone=False),
    Variant("patton-no-o2v", o2v=False),
)}


def variant(name: str) -> Variant:
    """Return the variant called ``name``.

    Raises:
        ConfigError: unknown variant (the message lists the known ones).
    """
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}") from None
