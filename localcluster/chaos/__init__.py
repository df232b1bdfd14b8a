"""The chaos runs: an audited L2 cluster under faults (kill -9, a fault proxy, a leader's hand-over, API
server restarts, crashing neighbours) and the invariants read from the API server's audit log. tests/chaos
runs the scenarios short and asserts their reports clean; benchmarks/chaos_bench.py runs them full size."""
