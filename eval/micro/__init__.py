"""The paper's microbenchmarks: the Commit Zone's single-token Value writes, and one SV
reduction split into fragments (``patton repro micro``; ``benchmarks/`` prints them)."""
