"""Where the measured numbers of each text come from: one module per text (``readme.py`` for
the README, ``evaluation.py`` for ``docs/evaluation.md``, ...), on the helpers of
``common.py``; ``docs/measured.py`` puts them in the texts.

Each text's module defines any of

- ``NUMBERS``: number name -> a function making the number's text from records;
- ``BLOCKS``: block name -> a function making a whole block (a table, a command's output);
- ``RECORDS``: quick record name -> the command whose JSON output it is (seconds to a minute;
  made again and compared by ``tests/test_docs_measured.py``);
- ``TIMED``: timed record name -> :class:`common.Timed` (wall times on this machine);
- ``STORED``: stored record name -> its file (full-scale ``patton repro`` results, reference
  data the tests compare with).

Names are unique across the modules (:func:`common.registry` checks).
"""
