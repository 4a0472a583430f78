"""``patton repro``: the paper's evaluation (Fig. 7, 8, 9 and the microbenchmarks), reproduced.

``paper`` holds the paper's numbers, ``tasks`` the independent configurations and how one runs
(local processes or Ray), ``figures`` turns their results into the figure records,
``plots`` and ``report`` draw and tabulate them, ``cli`` is the verb (``docs/evaluation.md``).
"""
