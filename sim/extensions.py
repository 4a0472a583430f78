"""Device extensions: optional features beyond AiM as the public simulator has it.

An extension *set* (``aim``, ``aim+wr16``) names the features a device has; ``aim``
(:data:`DEFAULT_EXT`) has none and is the device every default output is made on. A feature adds
DRAM commands and host instructions (defined in :mod:`patton.sim.isa`, like every other) and
derives their timing rules from the profile's (``data/device_extensions.json``,
``docs/extensions.md``):

* *inherit*: the added command joins the side of every rule that names the command it is
  ``like`` (WR16 is like WRA16);
* *drop*: except rules whose preceding side names ``like`` and whose following side lies within
  ``drop_following`` (WRA16's auto-precharge before the next activation);
* *add*: new rules, appended after the profile's slots (ids from :data:`~patton.sim.timing.SLOTS`
  on), so every slot of the profile keeps its id.

Invariant: under ``aim`` no table, rule, enum member or output changes; a feature's commands and
instructions exist in the ISA enums but are refused by every device without the feature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources

from patton.sim.isa import Command, Opcode

__all__ = ["EXTENSIONS", "DEFAULT_EXT", "DeviceExt", "UnknownExtensionError", "device_ext",
           "EXTENSION_COMMANDS", "EXTENSION_OPCODES", "BASE_COMMANDS", "ext_field",
           "NotOnDeviceError"]


@cache
def _data() -> dict:
    return json.loads(resources.files(__package__).joinpath("data/device_extensions.json")
                      .read_text())


#: Every extension set, in file order (``aim`` first).
EXTENSIONS: tuple[str, ...] = tuple(_data()["sets"])
#: The extension set used wherever none is named: AiM as the public simulator has it.
DEFAULT_EXT: str = _data()["default"]

#: The feature each extension-only DRAM command belongs to.
EXTENSION_COMMANDS: dict[Command, str] = {
    Command[c]: f for f, spec in _data()["features"].items() for c in spec["commands"]}
#: The feature each extension-only host instruction belongs to.
EXTENSION_OPCODES: dict[Opcode, str] = {
    Opcode[o]: f for f, spec in _data()["features"].items() for o in spec["opcodes"]}
#: The commands every device has, in value order (``aim``'s command set).
BASE_COMMANDS: tuple[Command, ...] = tuple(c for c in Command if c not in EXTENSION_COMMANDS)


class UnknownExtensionError(ValueError):
    """An extension set name that is not one of :data:`EXTENSIONS` (the message names them)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown device extension {name!r}; choose one of: "
                         + ", ".join(EXTENSIONS))
        self.name = name


class NotOnDeviceError(ValueError):
    """A command or instruction of a feature the device does not have."""


@dataclass(frozen=True)
class DeviceExt:
    """One extension set.

    Invariants: ``commands`` is :data:`BASE_COMMANDS` plus the features' commands, in value
    order; ``opcodes`` holds every instruction of :class:`Opcode` but the ones of features the
    set lacks.
    """

    name: str
    features: tuple[str, ...]
    commands: tuple[Command, ...]
    opcodes: frozenset[Opcode]

    def has(self, feature: str) -> bool:
        """True when this set includes ``feature`` (e.g. ``"wr16"``)."""
        return feature in self.features

    @cached_property
    def lacking(self) -> tuple[Opcode, ...]:
        """The instructions of :class:`Opcode` this set lacks, in their order."""
        return tuple(op for op in Opcode if op not in self.opcodes)

    def refuse(self, what: Command | Opcode) -> None:
        """Raise :class:`NotOnDeviceError` if ``what`` needs a feature this set lacks."""
        feature = (EXTENSION_COMMANDS.get(what) if isinstance(what, Command)
                   else EXTENSION_OPCODES.get(what))
        if feature is not None and feature not in self.features:
            raise NotOnDeviceError(
                f"{what.name} needs the device extension {needing(feature)!r} (this device is "
                f"{self.name!r}; choose it with --device-ext {needing(feature)})")

    def timing(self) -> list[dict]:
        """The timing recipes of this set's features, in feature order."""
        return [_data()["features"][f]["timing"] for f in self.features]

    def latency(self, parameters: dict) -> dict[Command, int]:
        """The completion latencies of this set's added commands, from the timing parameters."""
        out = {}
        for f in self.features:
            for name, terms in _data()["features"][f].get("latency", {}).items():
                out[Command[name]] = sum(parameters[t] for t in terms)
        return out


def needing(feature: str) -> str:
    """Return the first extension set that has ``feature``."""
    return next(name for name, fs in _data()["sets"].items() if feature in fs)


@cache
def device_ext(name: str | None = None) -> DeviceExt:
    """Return extension set ``name`` (default :data:`DEFAULT_EXT`).

    Raises:
        UnknownExtensionError: ``name`` is not one of :data:`EXTENSIONS`.
    """
    name = DEFAULT_EXT if name is None else name
    if not isinstance(name, str) or name not in EXTENSIONS:
        raise UnknownExtensionError(name)
    features = tuple(_data()["sets"][name])
    commands = tuple(c for c in Command
                     if c not in EXTENSION_COMMANDS or EXTENSION_COMMANDS[c] in features)
    opcodes = frozenset(o for o in Opcode
                        if o not in EXTENSION_OPCODES or EXTENSION_OPCODES[o] in features)
    return DeviceExt(name, features, commands, opcodes)


def ext_field(name: str) -> dict[str, str]:
    """The JSON field that records extension set ``name``: empty for :data:`DEFAULT_EXT`.

    Results made on the default device keep their shape (and bytes); any other set is named
    under ``"device_ext"``.
    """
    return {} if name == DEFAULT_EXT else {"device_ext": name}
