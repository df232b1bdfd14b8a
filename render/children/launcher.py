"""The launcher `batch/v1` Job `<job>-launcher`, whose pod runs mpirun."""

from __future__ import annotations

from typing import Any

from render import names
from render.api import Config, MPIJob
from render.children.common import decorate_gang, decorate_pod_spec, env_var, object_meta, pod_template_parts
from render.children.sshwait import wait_container

SSH_ARGS = "-o ConnectionAttempts=10"


def launcher_env(job: MPIJob) -> list[dict[str, str]]:
    """Appended after the user's env, so the operator's values win (the last duplicate wins)."""
    slots = str(job.spec.slots_per_worker)
    env = [env_var("K_MPI_JOB_ROLE", names.ROLE_LAUNCHER)]
    impl = job.spec.mpi_implementation
    if impl == "OpenMPI":
        env += [
            env_var("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            env_var("OMPI_MCA_orte_default_hostfile", names.HOSTFILE_PATH),
            env_var("OMPI_MCA_plm_rsh_args", SSH_ARGS),
            env_var("OMPI_MCA_orte_set_default_slots", slots),
            # Open MPI 5 (PRRTE) ignores the ORTE names above (upstream #842).
            env_var("PRTE_MCA_prte_default_hostfile", names.HOSTFILE_PATH),
            env_var("PRTE_MCA_prte_keep_fqdn_hostnames", "true"),
            env_var("PRTE_MCA_prte_set_default_slots", slots),
            env_var("PRTE_MCA_plm_ssh_args", SSH_ARGS),
        ]
    elif impl == "Intel":
        env += [
            env_var("I_MPI_HYDRA_HOST_FILE", names.HOSTFILE_PATH),
            env_var("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", SSH_ARGS),
            env_var("I_MPI_PERHOST", slots),
        ]
    elif impl == "MPICH":
        env += [
            env_var("HYDRA_HOST_FILE", names.HOSTFILE_PATH),
            env_var("HYDRA_LAUNCH_EXTRA_ARGS", SSH_ARGS),
            # The name MPICH's hydra actually reads (checked with MPICH 5 in tests/mpi); upstream's
            # name above is kept for images that rely on it.
            env_var("HYDRA_LAUNCHER_EXTRA_ARGS", SSH_ARGS),
        ]
    if not job.run_launcher_as_worker:
        # Keep the launcher off the node's GPUs unless it is also a worker.
        env += [env_var("NVIDIA_VISIBLE_DEVICES", ""), env_var("NVIDIA_DRIVER_CAPABILITIES", "")]
    return env


def launcher_pod_template(job: MPIJob, config: Config) -> dict[str, Any]:
    labels, annotations, spec = pod_template_parts(job.launcher.template)
    labels.update(names.role_selector(job.name, names.ROLE_LAUNCHER))
    if job.run_launcher_as_worker:
        labels[names.LABEL_REPLICA_INDEX] = "0"
    container = decorate_pod_spec(job, spec, names.launcher_name(job.name), config)
    container.setdefault("env", []).extend(launcher_env(job))
    spec["restartPolicy"] = job.launcher.restart_policy
    spec["volumes"].append(
        {
            "name": names.CONFIG_VOLUME,
            "configMap": {
                "name": names.config_name(job.name),
                "items": [
                    {"key": names.HOSTFILE_KEY, "path": names.HOSTFILE_KEY, "mode": 0o444},
                    {"key": names.DISCOVER_HOSTS_KEY, "path": names.DISCOVER_HOSTS_KEY, "mode": 0o555},
                    {"key": names.WAIT_SCRIPT_KEY, "path": names.WAIT_SCRIPT_KEY, "mode": 0o555},
                ],
            },
        }
    )
    container["volumeMounts"].append({"name": names.CONFIG_VOLUME, "mountPath": names.CONFIG_MOUNT_PATH})
    gate = wait_container(job, container)
    if gate is not None:
        # Last, so mpirun starts right after it: user init containers may take long (data, caches).
        spec.setdefault("initContainers", []).append(gate)
    decorate_gang(job, spec, labels, annotations, config, worker=False)
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def launcher_job(job: MPIJob, config: Config, *, suspend: bool) -> dict[str, Any]:
    """No ttlSecondsAfterFinished and no activeDeadlineSeconds: both act on the whole MPIJob instead."""
    spec: dict[str, Any] = {}
    if job.spec.run_policy.backoff_limit is not None:
        spec["backoffLimit"] = job.spec.run_policy.backoff_limit
    spec["podReplacementPolicy"] = "Failed"  # no replacement pod while the old one terminates (#810)
    spec["suspend"] = suspend
    spec["template"] = launcher_pod_template(job, config)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(job, names.launcher_name(job.name), names.object_labels(job.name)),
        "spec": spec,
    }
