"""Scripts that measure, each run as a file (`python benchmarks/<name>.py`); never tests.

A package so that the import contracts (pyproject.toml) read this checkout's scripts alone: they import
from `localcluster`, `reconcile` and `render`, never from `tests`.
"""
