"""The generic engine: differ, plan, per-kind policy semantics, managed fields, executor and its writer.

It knows Kubernetes (list-map keys, ownership, server-side apply, immutable fields) and nothing of the
product it serves: a controller hands it its per-kind policy and field manager as data
(``reconcile.mpijob.policy`` for the MPIJob controller). ``tests/unit/test_engine.py`` guards that.
"""
