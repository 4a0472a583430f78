"""``patton repro``: the paper's evaluation (Fig. 7, 8, 9 and the microbenchmarks), reproduced.

``figures`` holds one module per figure (the paper's numbers, its tasks, its record, plot and
tables) in a registry, the sensitivity among them; ``paper`` the paper's setup,
``assumptions`` the choices its text leaves open (named axes, the paper configuration) and
``plan`` the sizes of a run; ``tasks`` the independent configurations and how one runs,
``runner`` runs them (local processes or Ray) and ``store`` keeps them; ``cost``,
``gpu_cost`` and ``gpu_calibration`` price a serving run, ``micro`` holds the
microbenchmarks; ``repro`` and ``report`` put it together (``docs/evaluation.md``).
"""
