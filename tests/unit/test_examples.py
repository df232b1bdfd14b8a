"""examples/ are what users copy: valid, and the same jobs as their golden cases (no drift)."""

import pytest
import yaml

from localcluster.jobs import EXAMPLES, example, example_pi, pi_job
from render import parse_mpijob
from tests.unit.golden_cases import GOLDEN, KEY_FILE
from tests.unit.render_helpers import run_cli

# The application examples: each file's MPIJob is the golden case of its name.
APPLICATIONS = ("lammps-lj", "mpi4py-bench")
ZERO_UID = "00000000-0000-0000-0000-000000000000"


def test_pi_example_is_the_golden_openmpi_pi_job():
    example = example_pi()
    golden = yaml.safe_load((GOLDEN / "openmpi-pi" / "mpijob.yaml").read_text())
    parse_mpijob({**example, "metadata": {**example["metadata"], "namespace": "default"}})
    assert "uid" not in example["metadata"]  # the API server assigns it
    assert example["spec"] == golden["spec"]
    assert example["metadata"]["name"] == golden["metadata"]["name"]


def test_the_tests_pi_builder_is_the_example():
    assert pi_job() == yaml.safe_load((EXAMPLES / "pi.yaml").read_text())
    parse_mpijob({**pi_job(impl="Intel", root=True), "metadata": {"name": "pi", "namespace": "ns"}})


def test_every_example_is_checked_here():
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted(("pi", *APPLICATIONS))


@pytest.mark.parametrize("name", APPLICATIONS)
def test_application_example_renders_as_its_golden_case(name: str) -> None:
    path = EXAMPLES / f"{name}.yaml"
    docs = example(name)
    (job,) = [d for d in docs if d["kind"] == "MPIJob"]
    golden = yaml.safe_load((GOLDEN / name / "mpijob.yaml").read_text())
    assert "uid" not in job["metadata"]
    assert (job["metadata"]["name"], job["spec"]) == (name, golden["spec"])
    others = [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs if d is not job]
    code, out, err = run_cli(
        ["-f", str(path), "--now", "2025-06-01T12:00:00Z", "--ssh-key", str(KEY_FILE), "--show-secrets"]
    )
    assert code == 0, err
    # Without a uid (the API server assigns it) render owns the children by the zero uid.
    assert out.replace(ZERO_UID, golden["metadata"]["uid"]) == (GOLDEN / name / "children.yaml").read_text()
    # The bundle's other objects (the input ConfigMap) are named, in the singular for one.
    if others:
        noun = "object that is not an MPIJob" if len(others) == 1 else "objects that are not MPIJobs"
        assert err == f"skipped {len(others)} {noun}: {', '.join(others)}\n"
    else:
        assert err == ""


def test_the_lammps_input_is_mounted_where_the_launcher_points_lmp() -> None:
    docs = example("lammps-lj")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    job = next(d for d in docs if d["kind"] == "MPIJob")
    specs = job["spec"]["mpiReplicaSpecs"]
    args = specs["Launcher"]["template"]["spec"]["containers"][0]["args"]
    worker = specs["Worker"]["template"]["spec"]
    (volume,) = worker["volumes"]
    (mount,) = worker["containers"][0]["volumeMounts"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    (key,) = config_map["data"]
    assert args[args.index("-in") + 1] == f"{mount['mountPath']}/{key}"
    # np = workers x slots: one rank per slot.
    assert int(args[args.index("-n") + 1]) == specs["Worker"]["replicas"] * job["spec"]["slotsPerWorker"]
