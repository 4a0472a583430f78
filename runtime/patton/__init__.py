"""PATTON itself: granule geometry and allocation, placement metadata, the block lifecycle, the
Commit Zone, and PATTON's ablations (``docs/runtime.md``)."""
