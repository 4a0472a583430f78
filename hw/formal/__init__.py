"""Formal proofs of the RTL channel's parts with SymbiYosys (``docs/verification.md``).

Harnesses (one property each, as Amaranth ``Assert``/``Assume`` over free inputs):
:mod:`.timing` (the timing checker against the timing table), :mod:`.protocol` (the decoder and
the row state against the protocol table), :mod:`.storage` (write then read of the global
buffer, a mat and a bank's row buffer). :mod:`.free_mac` stands in for the MAC units,
:mod:`.sby` runs SymbiYosys, :mod:`.vcd` reads a counterexample, :mod:`.proofs` lists the
proofs with their configurations and bounds.

These modules are verification code, not part of the channel: besides ``sim.isa``,
``sim.timing`` and ``sim.device`` they import ``sim.protocol``, the specification of the
decoder.
"""
