"""`mpijob-render --plan NAME`: what the operator would do now for a live MPIJob, read-only.

It reads the MPIJob and its children from the API server (GET and LIST only), renders them as the
operator does and prints the plan the operator's own differ computes: creates, patches with their JSON
patches, deletes, conflicts (names held by objects the job does not own), plus the status change. It writes
nothing. Exit 0 when the operator would write nothing, 1 when it would, 2 on bad input (as `kubectl diff`).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import yaml

import render
from reconcile.engine import managedfields
from reconcile.engine.differ import plan
from reconcile.mpijob.controller import CHILD_SELECTOR, podgroup_resource
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from reconcile.mpijob.syncstate import launcher_resume_needs_start_time_cleared
from reconcile.runtime.informer import controller_ref
from reconcile.runtime.kube import (
    CONFIGMAP,
    JOB,
    MPIJOB,
    POD,
    PRIORITY_CLASS,
    SECRET,
    SERVICE,
    ApiError,
    Kube,
    api_client,
)
from render import names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mpijob-render --plan", description=__doc__, allow_abbrev=False)
    p.add_argument("name", help="the MPIJob: NAME or NAMESPACE/NAME")
    p.add_argument(
        "-n", "--namespace", default="", help="its namespace (default: the kubeconfig's, else default)"
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--cluster-domain", default="", help="as the operator's --cluster-domain")
    p.add_argument("--gang-scheduling", default="", help="as the operator's --gang-scheduling")
    p.add_argument("-o", "--output", choices=("yaml", "text"), default="yaml")
    return p


def _ours(obj: dict[str, Any], uid: str) -> bool:
    return (controller_ref(obj) or {}).get("uid") == uid


def live_children(kube: Kube, job: Any, config: render.Config) -> list[dict[str, Any]]:
    """What the operator's caches hold for the job: its children, its launcher's pods, any object holding
    a name it wants, and PriorityClasses with gang scheduling."""
    resources = [POD, SERVICE, CONFIGMAP, SECRET, JOB]
    pg = podgroup_resource(config.gang_scheduling)
    if pg is not None:
        resources.append(pg)
    listed = {res: kube.list(res, job.namespace, labelSelector=CHILD_SELECTOR)["items"] for res in resources}
    out = [o for items in listed.values() for o in items if _ours(o, job.uid)]
    launchers = {o["metadata"].get("uid") for o in out if o.get("kind") == "Job"}
    out += [p for p in listed[POD] if (controller_ref(p) or {}).get("uid") in launchers]
    have = {(o.get("kind"), o["metadata"].get("name")) for o in out}
    by_kind = {res.kind: res for res in resources}
    for kind, name in render.wanted_names(job, config):
        if (kind, name) in have or kind not in by_kind:
            continue
        try:
            held = kube.get(by_kind[kind], job.namespace, name)
        except ApiError as err:
            if err.status == 404:
                continue
            raise
        held.setdefault("apiVersion", by_kind[kind].api_version)
        held.setdefault("kind", kind)
        out.append(held)
    if pg is not None:
        out += kube.list(PRIORITY_CLASS)["items"]
    return [managedfields.slim(o) for o in out]


def compute(mpijob: dict[str, Any], live: list[dict[str, Any]], config: render.Config, now: datetime) -> dict:
    """The report: the status patch and the plan, as the operator's sync computes them."""
    job = render.parse_mpijob(mpijob)
    has_secret = any(
        o.get("kind") == "Secret" and o["metadata"].get("name") == names.ssh_secret_name(job.name)
        for o in live
    )
    key = None if has_secret else render.generate_ssh_key()
    observed = render.Observed.from_objects(live, now=now, fresh_ssh_key=key)
    old = mpijob.get("status") or {}
    new = render.status(job, observed, config)
    desired = render.render(job, observed, config)
    children = [o for o in live if o.get("kind") != "PriorityClass"]
    report: dict[str, Any] = {"mpijob": f"{job.namespace}/{job.name}"}
    report["status"] = jsonpatch.make_patch(old, new).patch
    if launcher_resume_needs_start_time_cleared(desired, children) is not None:
        report["before"] = ["clear the launcher Job's status.startTime (resume)"]
    the_plan = plan(desired, children, POLICY, job.uid, field_manager=FIELD_MANAGER)
    report["plan"] = the_plan.to_dict()
    report["summary"] = str(the_plan)
    report["writes"] = the_plan.writes + (1 if report["status"] else 0) + len(report.get("before", ()))
    if render.ttl_expired(job, new, now):
        report["ttl"] = "expired: the operator deletes the MPIJob"
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    namespace, _, name = args.name.rpartition("/")
    try:
        client = api_client(args.kubeconfig, "")
        namespace = namespace or args.namespace or _context_namespace(args.kubeconfig) or "default"
        kube = Kube(client, qps=0)
        config = render.Config(cluster_domain=args.cluster_domain, gang_scheduling=args.gang_scheduling)
        mpijob = kube.get(MPIJOB, namespace, name)
        report = compute(
            mpijob, live_children(kube, render.parse_mpijob(mpijob), config), config, datetime.now(UTC)
        )
    except render.ValidationError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # kubeconfig, connection
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.output == "text":
        lines = [f"{report['mpijob']}:", report["summary"]]
        lines += [f"status: {op['op']} {op['path']}" for op in report["status"]]
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(report, sort_keys=False, width=120))
    return 1 if report["writes"] else 0


def _context_namespace(kubeconfig: str) -> str:
    from kubernetes import config as kubeconfig_module

    try:
        _, current = kubeconfig_module.list_kube_config_contexts(config_file=kubeconfig or None)
    except Exception:
        return ""
    return str((current or {}).get("context", {}).get("namespace") or "")


if __name__ == "__main__":
    sys.exit(main())
