"""Differ, executor and controller that turn render's output into cluster state."""
