"""PATTON's program building: write programs, attention plans, tables and batch layouts."""
