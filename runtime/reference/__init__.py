"""References the runtime is tested against: NumPy attention and programs built one by one.

Nothing in production code imports these; the tests and the checks of a serving run do.
"""
