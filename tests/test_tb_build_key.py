"""The RTL build is keyed on one file set, whether the Verilog was just emitted or cached."""

from __future__ import annotations

from patton.hw.params import ChannelParams
from patton.tb.player import SchedulePlayer


def test_emitted_and_cached_verilog_give_the_same_files(tmp_path, monkeypatch):
    import patton.tb.player as player

    monkeypatch.setattr(player, "BUILD_ROOT", tmp_path)
    p = SchedulePlayer(ChannelParams(rows=16), build=False)
    first = p._verilog()  # emitted now
    again = p._verilog()  # found in the cache
    assert first == again and len(first) == 3
    assert [f.suffix for f in first] == [".v", ".v", ".vlt"] and all(f.exists() for f in first)
