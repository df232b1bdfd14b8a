"""Upper bounds on MPIJob numbers, shared by validation and the CRD generator so both say the same.

Every number whose meaning has a limit gets it here: int32 fields their type's maximum, durations the
largest value every computed time survives, and the worker count what its hostfile ConfigMap can hold.
"""

from __future__ import annotations

from functools import cache

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Kubernetes turns durations into Go's time.Duration (int64 nanoseconds): about 292 years. Any start time
# a live object can carry plus this stays far inside datetime's range (year 9999 is saturated anyway).
MAX_DURATION_SECONDS = INT64_MAX // 10**9

# The API server rejects a ConfigMap whose data exceeds 1 MiB; keep a little room for the keys and the
# script header.
CONFIGMAP_MAX_BYTES = 1024 * 1024
CONFIGMAP_RESERVE = 1024
DNS_LABEL_MAX = 63
# Worst cases the admission rule cannot see: the namespace's length, the slots digits, --cluster-domain.
NAMESPACE_MAX = 63
CLUSTER_DOMAIN_MAX = 63
SLOTS_DIGITS_MAX = len(str(INT32_MAX))
WORKER_INFIX = "-worker-"
# Per host: "<host>.<job>.<ns>.svc.<domain> slots=<n>\n" in the hostfile, "echo <fqdn>\n" in
# discover_hosts.sh.
_HOSTFILE_EXTRA = len(" slots=") + SLOTS_DIGITS_MAX + 1
_DISCOVER_EXTRA = len("echo ") + 1


def _fqdn_len(host_len: int, name_len: int) -> int:
    return host_len + 1 + name_len + 1 + NAMESPACE_MAX + len(".svc") + 1 + CLUSTER_DOMAIN_MAX


def configmap_bytes(name_len: int, workers: int) -> int:
    """An upper bound of the ConfigMap data for `workers` workers (and the launcher as a worker)."""
    launcher = name_len + len("-launcher")
    total = len("hostfile") + len("discover_hosts.sh") + len("#!/bin/sh\n")
    total += launcher + _HOSTFILE_EXTRA + _fqdn_len(launcher, name_len) + _DISCOVER_EXTRA
    per_worker = 2 * _fqdn_len(name_len + len(WORKER_INFIX), name_len) + _HOSTFILE_EXTRA + _DISCOVER_EXTRA
    # index digits: 10**k - 10**(k-1) indexes have k digits (index 0 has one)
    digits, start = 1, 0
    while start < workers:
        end = min(workers, 10**digits)
        total += (end - start) * (per_worker + 2 * digits)
        start, digits = end, digits + 1
    return total


@cache
def max_workers(name_len: int) -> int:
    """The largest worker count a job whose name has `name_len` characters may have: every worker pod
    name `<name>-worker-<index>` a DNS label, and the hostfile ConfigMap within the API server's limit."""
    digits = DNS_LABEL_MAX - name_len - len(WORKER_INFIX)
    if digits < 1:
        return 0
    by_name = min(10**digits, INT32_MAX)
    budget = CONFIGMAP_MAX_BYTES - CONFIGMAP_RESERVE
    lo, hi = 0, by_name
    while lo < hi:  # the largest count within budget
        mid = (lo + hi + 1) // 2
        if configmap_bytes(name_len, mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_workers_table() -> list[int]:
    """max_workers for name lengths 1..63, index 0 for length 1 (the CRD's rule looks it up)."""
    return [max_workers(n) for n in range(1, DNS_LABEL_MAX + 1)]


def worker_limit_message(name_len: int) -> str:
    """Why a worker count is too large, as render and the CRD's rule both say it."""
    return (
        f"must be less than or equal to {max_workers(name_len)} for a job whose name has {name_len} "
        "characters (each worker pod name must be a DNS label and the hostfile of all workers must fit in "
        "one ConfigMap of 1 MiB)"
    )
