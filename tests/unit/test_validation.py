"""Parsing, defaulting and validation: every error at once, with field paths, and only ValidationError."""

import pytest

from render import ValidationError, parse_mpijob
from render.parse import load_yaml
from tests.unit.render_helpers import job


def errors_of(obj) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_mpijob(obj)
    return info.value.lines()


def test_defaults():
    parsed = parse_mpijob(job())
    assert parsed.spec.run_policy.clean_pod_policy == "Running"  # the project's default, upstream: None
    assert parsed.spec.slots_per_worker == 1
    assert parsed.spec.ssh_auth_mount_path == "/root/.ssh"
    assert parsed.spec.mpi_implementation == "OpenMPI"
    assert parsed.spec.launcher_creation_policy == "AtStartup"
    assert parsed.launcher.restart_policy == "OnFailure"
    assert parsed.worker.restart_policy == "Never"


def test_empty_job_reports_every_error():
    lines = errors_of({"metadata": {"name": "x", "namespace": "ns"}, "spec": {}})
    assert lines == ["spec.mpiReplicaSpecs: Required value: must have replica specs"]
    lines = errors_of({"metadata": {}, "spec": {"mpiReplicaSpecs": {}}})
    assert "metadata.name: Required value: name is required" in lines
    assert "metadata.namespace: Required value" in lines
    assert "spec.mpiReplicaSpecs[Launcher]: Required value: must have Launcher replica spec" in lines


def test_replica_checks():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 0
    j["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = []
    assert errors_of(j) == [
        "spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1",
        "spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 0: must be greater than or equal to 1",
        'spec.mpiReplicaSpecs[Worker].restartPolicy: Unsupported value: "Always": supported values: "Never", '
        '"OnFailure"',
        "spec.mpiReplicaSpecs[Worker].template.spec.containers: Required value: must define at least one "
        "container",
    ]


def test_wrong_types_are_errors_with_paths_not_exceptions():
    j = job(slotsPerWorker="4", runLauncherAsWorker="yes")
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "two"
    j["spec"]["runPolicy"] = {"backoffLimit": 1.5, "suspend": 1}
    assert sorted(errors_of(j)) == [
        "spec.mpiReplicaSpecs[Worker].replicas: Invalid value: string: must be an integer",
        "spec.runLauncherAsWorker: Invalid value: string: must be a boolean",
        "spec.runPolicy.backoffLimit: Invalid value: number: must be an integer",
        "spec.runPolicy.suspend: Invalid value: number: must be a boolean",
        "spec.slotsPerWorker: Invalid value: string: must be an integer",
    ]


def test_list_where_a_map_belongs():
    # one error per path: the "Required" that follows from the unreadable value is not repeated
    assert errors_of(job(mpiReplicaSpecs=[1, 2])) == [
        "spec.mpiReplicaSpecs: Invalid value: array: must be an object"
    ]
    assert errors_of([]) == ["<root>: Invalid value: array: must be an object"]
    assert errors_of({"metadata": "pi"})[0] == "metadata: Invalid value: string: must be an object"


def test_name_must_keep_every_child_a_dns_label():
    # pi-worker-9 fits; a 55-character name gives "<name>-worker-9" = 64 characters.
    name = "a" * 55
    j = job()
    j["metadata"]["name"] = name
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 10
    assert errors_of(j) == [
        f'metadata.name: Invalid value: "{name}": will not able to create pod and service with invalid '
        f'DNS label "{name}-worker-9": must be no more than 63 characters'
    ]
    j["metadata"]["name"] = "a" * 54  # exactly 63
    parse_mpijob(j)
    j["metadata"]["name"] = "1-foo"
    assert errors_of(j)[0].startswith('metadata.name: Invalid value: "1-foo": must be a DNS-1035 label')


def test_enums():
    j = job(launcherCreationPolicy="Later", mpiImplementation="MVAPICH", runPolicy={"managedBy": "me"})
    j["spec"]["runPolicy"]["cleanPodPolicy"] = "Some"
    assert errors_of(j) == [
        'spec.runPolicy.cleanPodPolicy: Unsupported value: "Some": supported values: "All", "None", '
        '"Running"',
        'spec.runPolicy.managedBy: Unsupported value: "me": supported values: "kubeflow.org/mpi-operator", '
        '"kueue.x-k8s.io/multikueue"',
        'spec.mpiImplementation: Unsupported value: "MVAPICH": supported values: "Intel", "MPICH", "OpenMPI"',
        'spec.launcherCreationPolicy: Unsupported value: "Later": supported values: "AtStartup", '
        '"WaitForWorkersReady"',
    ]


def test_negative_numbers():
    j = job(slotsPerWorker=-1, runPolicy={"ttlSecondsAfterFinished": -1, "backoffLimit": -2})
    assert errors_of(j) == [
        "spec.slotsPerWorker: Invalid value: -1: must be greater than or equal to 0",
        "spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -1: must be greater than or equal to 0",
        "spec.runPolicy.backoffLimit: Invalid value: -2: must be greater than or equal to 0",
    ]
    parse_mpijob(job(slotsPerWorker=0))  # upstream accepts 0


def test_what_the_api_server_would_reject_later():
    j = job()
    tpl = j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    tpl["metadata"] = {"labels": {"team": "a b"}}
    tpl["spec"]["volumes"] = [{"name": "ssh-auth", "emptyDir": {}}]
    tpl["spec"]["containers"][0]["volumeMounts"] = [{"name": "x", "mountPath": "/root/.ssh"}]
    tpl["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "lots"}}
    lines = errors_of(j)
    base = "spec.mpiReplicaSpecs[Worker].template"
    assert f'{base}.metadata.labels[team]: Invalid value: "a b": must be a valid label value' in lines
    assert f'{base}.spec.volumes[0].name: Duplicate value: "ssh-auth": reserved by the operator' in lines
    assert (
        f'{base}.spec.containers[0].resources.limits[cpu]: Invalid value: "lots": must be a quantity' in lines
    )
    assert any(line.startswith(f"{base}.spec.containers[0].volumeMounts[0].mountPath") for line in lines)
    assert len(lines) == 4


def test_yaml_syntax_error_is_a_validation_error():
    with pytest.raises(ValidationError):
        load_yaml("spec: [unclosed")


def test_unknown_replica_type():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Server"] = {"replicas": 1}
    assert errors_of(j) == [
        'spec.mpiReplicaSpecs[Server]: Unsupported value: "Server": supported values: "Launcher", "Worker"'
    ]
