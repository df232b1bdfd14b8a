"""examples/ are what users copy: valid, and the same jobs as their golden cases (no drift)."""

from pathlib import Path

import yaml

from render import parse_mpijob

ROOT = Path(__file__).resolve().parents[2]


def test_pi_example_is_the_golden_openmpi_pi_job():
    example = yaml.safe_load((ROOT / "examples" / "pi.yaml").read_text())
    golden = yaml.safe_load((ROOT / "golden" / "openmpi-pi" / "mpijob.yaml").read_text())
    parse_mpijob({**example, "metadata": {**example["metadata"], "namespace": "default"}})
    assert "uid" not in example["metadata"]  # the API server assigns it
    assert example["spec"] == golden["spec"]
    assert example["metadata"]["name"] == golden["metadata"]["name"]


def test_the_tests_pi_builder_is_the_example():
    from tests.utils import pi_job

    example = yaml.safe_load((ROOT / "examples" / "pi.yaml").read_text())
    assert pi_job() == example
    parse_mpijob({**pi_job(impl="Intel", root=True), "metadata": {"name": "pi", "namespace": "ns"}})
