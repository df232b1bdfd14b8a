"""The generic engine: differ, plan, per-kind policy semantics, managed fields, executor.

It knows Kubernetes (list-map keys, ownership, server-side apply, immutable fields) and nothing of
MPI: the controller hands it the per-kind policy and its field manager as data.
"""
