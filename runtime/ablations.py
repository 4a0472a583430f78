"""The paper's ablations behind the runtime's one interface (§5.4).

``patton``
    PATTON: Commit Zone, O2V of ``n_o1p2`` O1Vs.
``no_cz``
    PATTON-wo-CZ: the same Key and Value layouts, partial Value blocks written straight to
    their O1V (``WR_ABK`` per Value row; ``token_op="mem"`` for per-bank ``W MEM``).
``no_o2v``
    PATTON without O2V: every request owns whole VRSs (one O2V = all columns of a VRS).
"""

from __future__ import annotations

import dataclasses

from patton.runtime.config import Config
from patton.runtime.errors import ConfigError
from patton.runtime.lifecycle import Runtime
from patton.runtime.metadata import Mode

__all__ = ["VARIANTS", "variant"]

VARIANTS = ("patton", "no_cz", "no_o2v")


def variant(name: str, config: Config, *, token_op: str = "abk") -> Runtime:
    """Return a fresh runtime for ablation ``name`` of ``config``.

    Raises:
        ConfigError: unknown variant.
    """
    if name == "patton":
        return Runtime(config)
    if name == "no_cz":
        return Runtime(config, Mode.NO_CZ, token_op=token_op)
    if name == "no_o2v":
        whole = dataclasses.replace(config, o2v_blocks=config.device.columns)
        return Runtime(whole)
    raise ConfigError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
