"""The cocotb / Verilator testbench of one AiM channel (``docs/tb.md``).

:mod:`~patton.tb.player` (the Verilator build and one-shot replays), :mod:`~patton.tb.session`
(a live simulator fed through named pipes), :mod:`~patton.tb.executor` (``RtlExecutor``, the
executor interface on live RTL channels); the cocotb roles :mod:`~patton.tb.driver`,
:mod:`~patton.tb.monitor`, :mod:`~patton.tb.reference`, :mod:`~patton.tb.scoreboard`, and the
in-simulator regressions :mod:`~patton.tb.regressions`; ``patton rtl`` in :mod:`~patton.tb.cli`.
"""
