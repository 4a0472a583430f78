"""The serving side: what drives the PATTON runtime on the device models.

``scenario`` generates random serving scenarios as replayable event logs, ``loop`` replays them
through a runtime and the device executors, ``checks`` compares what comes back with the
references.
"""
