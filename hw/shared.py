# amaranth: UnusedElaboratable=no
"""One Verilog module for many identical units: the channel's 16 MAC units in generated Verilog.

Amaranth emits a module per instance, so the 16 MAC units of a channel become 16 modules with
the same body, and Verilator compiles 16 copies of the same code into the simulator, all run
after every MAC16: straight-line code per command larger than the processor's caches.
:func:`shared_instance` puts an instance of a module that is emitted once
(:func:`module_verilog`) in a design instead; ``hw/generate.py`` writes that module beside the
channel and tells Verilator (:func:`verilator_control`) to keep it a module of its own, so the
simulator runs one function 16 times (``docs/hw.md`` decision 20).

The units behave the same either way; ``amaranth.sim`` cannot run an ``Instance``, so a channel
for Amaranth's simulator keeps its units as submodules (``Channel(blackbox=False)``).

(The first line lets :func:`shared_instance` make a unit only to read its ports without
Amaranth warning that the unit is never elaborated.)
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth.back import verilog
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["shared_instance", "module_verilog", "verilator_control"]


def _ports(signature: wiring.Signature, obj) -> list[tuple[str, bool, object]]:
    """``(name, is_input, value)`` of each port, named as Amaranth names a top module's."""
    return [("__".join(str(part) for part in path), member.flow == In, value)
            for path, member, value in signature.flatten(obj)]


def shared_instance(unit: Callable[[], wiring.Component], module: str, *,
                    name: str) -> tuple[wiring.PureInterface, Instance]:
    """Return the ports of a unit and an instance of ``module`` connected to them.

    Parameters
    ----------
    unit : callable
        Makes the unit the module is emitted from (a component class, e.g. ``MacUnit``); one is
        made here to read its signature.
    module : str
        Name of the module (:func:`module_verilog` emits it).
    name : str
        Prefix of the port signals' names (the instance's name in its parent).

    Returns
    -------
    tuple[wiring.PureInterface, Instance]
        The ports, used as the unit's would be (``ports.a``), and the instance, to add to the
        parent's submodules under ``name``.
    """
    signature = unit().signature
    ports = signature.create(path=(name,))
    connections = {("i_" if is_input else "o_") + port: value
                   for port, is_input, value in _ports(signature, ports)}
    return ports, Instance(module, **connections)


def module_verilog(component: wiring.Component, module: str) -> str:
    """Return the Verilog of ``component`` as the module ``module`` (ports named as
    :func:`shared_instance` connects them)."""
    return verilog.convert(component, name=module, emit_src=False, strip_internal_attrs=True)


def verilator_control(component: wiring.Component, module: str) -> list[str]:
    """Verilator control lines that keep ``module`` one module of its own.

    ``no_inline`` keeps it out of its parent. Verilator also replaces a port that is only a
    wire by the parent's signal it is connected to, which makes each instance's code read other
    signals and so a function of its own; declaring the ports readable (``public_flat_rd``)
    keeps them variables of the module, so that every instance runs the same function. Build
    with ``-fno-dfg``: the dataflow optimiser names its temporaries per instance, which again
    makes the instances' functions differ.
    """
    lines = [f'no_inline -module "{module}"']
    lines += [f'public_flat_rd -module "{module}" -var "{name}"'
              for name, _, _ in _ports(component.signature, component)]
    return lines
