"""L1 helpers shared by the cluster tests (fixtures are in conftest.py): the MPIJob API's names, kubectl
and `mpijob plan` as a user runs them, a minimal MPIJob, and access reviews as a given user."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.utils import REPO

GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"


CRD_NAME = f"{PLURAL}.{GROUP}"


OPERATOR_NS = "mpi-operator"


OPERATOR_SA = f"system:serviceaccount:{OPERATOR_NS}:mpi-operator"


def _can(
    api_client: Any, verb: str, resource: str, namespace: str = "", name: str = "", group: str = ""
) -> bool:
    resource, _, subresource = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "name": name,
            }
        },
    }
    return client.AuthorizationV1Api(api_client).create_self_subject_access_review(review).status.allowed


def _user_client(cluster: Any, user: str, groups: tuple[str, ...] = ()) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.write_user_kubeconfig(user, groups)))


def plan(kubeconfig: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "reconcile.cli", "plan", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout)
