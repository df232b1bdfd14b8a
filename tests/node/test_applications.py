"""L4: MPI applications nobody here wrote, run from examples/ across the real nodes, their output checked
against what their authors publish: LAMMPS's Lennard-Jones benchmark and mpi4py's bundled benchmarks."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from localcluster.e2e import condition_is, name_of
from localcluster.jobs import example
from localcluster.realnode import NodeE2E, on_real_nodes
from reconcile.runtime.kube import CONFIGMAP
from tests.node.support import REAL_NODES

pytestmark = pytest.mark.l4

# LAMMPS's published log of bench/in.lj (bench/log.15Jul25.lj.fixed.g++.4 in LAMMPS's sources; the
# 1-process log of the same input and the logs of earlier releases print the same lines):
#   Step Temp E_pair E_mol TotEng Press, at step 0 and step 100, and the neighbour count.
PUBLISHED_THERMO = {
    0: (1.44, -6.7733681, 0.0, -4.6134356, -5.0197073),
    100: (0.7574531, -5.7585055, 0.0, -4.6223613, 0.20726105),
}
PUBLISHED_NEIGHBORS = 1202833
ATOMS = 32000
# The log prints 8 significant digits. Our run differs from the published one in the order 6 ranks (a
# 1x2x3 grid) instead of 4 (1x2x2) sum the forces: a rounding difference near 1e-15 that 100 steps of
# this melt do not grow anywhere near 1e-8. 1e-6 leaves room for a last-digit difference from another
# compiler or libm, while a wrong answer (a rank's atoms lost, a wrong lattice, seed or cutoff) moves
# these values in the third digit or earlier.
TOLERANCE = 1e-6
HELLO = re.compile(r"^Hello, World! I am process +(\d+) of (\d+) on (\S+)\.$", re.M)
RING = re.compile(r"^time for (\d+) loops = (\S+) seconds \((\d+) processes, (\d+) bytes\)$", re.M)


def thermo(log: str) -> dict[int, tuple[float, ...]]:
    """Step -> the thermo columns after it, from the block under LAMMPS's `Step Temp ...` header."""
    rows: dict[int, tuple[float, ...]] = {}
    lines = iter(log.splitlines())
    for line in lines:
        if line.split()[:2] == ["Step", "Temp"]:
            width = len(line.split())
            for row in lines:
                words = row.split()
                if len(words) != width or not words[0].isdigit():
                    break
                rows[int(words[0])] = tuple(float(w) for w in words[1:])
    return rows


def one(pattern: str, log: str) -> re.Match[str]:
    found = re.search(pattern, log, re.M)
    assert found, f"no line matching {pattern!r} in the launcher's log:\n{log}"
    return found


def run_example(e2e: NodeE2E, name: str) -> tuple[dict[str, Any], str, dict[str, str]]:
    """examples/<name>.yaml on the real nodes (workers kept, to see where they ran): the finished
    MPIJob, its launcher's log and worker -> node."""
    objects = example(name)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            e2e.kube.create(CONFIGMAP, e2e.ns, {**obj, "metadata": {**obj["metadata"], "namespace": e2e.ns}})
    (job,) = [obj for obj in objects if obj["kind"] == "MPIJob"]
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    job, log = e2e.run(on_real_nodes(job))
    print(f"[l4] {name} launcher log:\n{log}")
    assert condition_is(job, "Succeeded"), f"{e2e.describe(name)}\n{log}"
    placed = {name_of(p): p["spec"]["nodeName"] for p in e2e.workers(name)}
    assert len(set(placed.values())) == len(placed) == REAL_NODES, placed  # one worker per node
    return job, log, placed


def test_lammps_lj_benchmark_matches_the_published_log(node_e2e: NodeE2E) -> None:
    _, log, _ = run_example(node_e2e, "lammps-lj")
    ranks = 2 * REAL_NODES
    one(rf"^Created {ATOMS} atoms$", log)
    loop = one(rf"^Loop time of \S+ on {ranks} procs for 100 steps with {ATOMS} atoms$", log)
    print(f"[l4] lammps-lj: {loop.group(0)}")
    one(rf"with {ranks} MPI tasks x", log)
    neighbors = one(r"^Total # of neighbors = (\d+)$", log)
    published_line = f"published: {PUBLISHED_NEIGHBORS}"
    assert int(neighbors.group(1)) == PUBLISHED_NEIGHBORS, f"{neighbors.group(0)}, {published_line}"
    rows = thermo(log)
    for step, published in PUBLISHED_THERMO.items():
        assert step in rows, f"no thermo line for step {step}:\n{log}"
        ours = rows[step]
        assert len(ours) == len(published), (ours, published)
        pairs = zip(ours, published, strict=True)
        close = [math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE) for a, b in pairs]
        assert all(close), f"step {step}: ours {ours}, LAMMPS's published {published}"


def test_mpi4py_helloworld_and_ringtest_span_the_nodes(node_e2e: NodeE2E) -> None:
    _, log, placed = run_example(node_e2e, "mpi4py-bench")
    ranks = 2 * REAL_NODES
    hello = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in HELLO.finditer(log)}
    # Open MPI fills a worker's slots before the next one: ranks 0 and 1 on worker 0, and so on.
    assert hello == {r: (ranks, f"mpi4py-bench-worker-{r // 2}") for r in range(ranks)}, log
    assert {host for _, host in hello.values()} == set(placed), placed
    ring = one(RING.pattern, log)
    assert (int(ring.group(1)), int(ring.group(3)), int(ring.group(4))) == (10, ranks, 1048576), log
    assert float(ring.group(2)) > 0, log
    print(f"[l4] mpi4py-bench: {ring.group(0)}")
