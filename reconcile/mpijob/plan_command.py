"""`mpijob plan NAME`: what the operator would do now for a live MPIJob, read-only.

It reads the MPIJob and its children from the API server (GET and LIST only), and prints what the
operator's own ``decide`` makes of them: creates, patches with their JSON patches, deletes, conflicts
(names held by objects the job does not own), plus the status change. It writes nothing. Exit 0 when
the operator would write nothing, 1 when it would, 2 on bad input (as `kubectl diff`).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import attrs
import jsonpatch
import yaml

import render
from reconcile.engine import managedfields
from reconcile.mpijob.decide import Action, decide, needs_fresh_key
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.policy import CHILD_SELECTOR, podgroup_resource
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


def _parser(prog: str = "mpijob plan") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    """The report of the operator's own decision (reconcile.mpijob.decide) on this state."""
    memory = JobMemory(uid=str((mpijob.get("metadata") or {}).get("uid", "")))
    if needs_fresh_key(mpijob, live, memory):
        memory = attrs.evolve(memory, fresh_ssh_key=render.generate_ssh_key())
    decision = decide(mpijob, live, memory, now, config)
    meta = mpijob.get("metadata") or {}
    report: dict[str, Any] = {"mpijob": f"{meta.get('namespace', '')}/{meta.get('name', '')}"}
    status = decision.status
    report["status"] = jsonpatch.make_patch(status.old, status.new).patch if status is not None else []
    if decision.clear_start_time is not None:
        report["before"] = ["clear the launcher Job's status.startTime (resume)"]
    report["plan"] = decision.plan.to_dict()
    report["summary"] = str(decision.plan)
    if decision.hostfile_held:
        report["held"] = "a hostfile-only ConfigMap patch is held back, to be written with the next changes"
    report["writes"] = decision.plan.writes + (1 if report["status"] else 0) + len(report.get("before", ()))
    if decision.action is Action.DELETE_JOB:
        report["ttl"] = "expired: the operator deletes the MPIJob"
        report["writes"] += 1
    elif decision.action is Action.IGNORE:
        report["ignored"] = "deleted, or managed by another controller (spec.runPolicy.managedBy)"
    return report


def main(argv: list[str] | None = None, prog: str = "mpijob plan") -> int:
    args = _parser(prog).parse_args(argv)
    namespace, _, name = args.name.rpartition("/")
    try:
        client = api_client(args.kubeconfig, "")
        namespace = namespace or args.namespace or _context_namespace(args.kubeconfig) or "default"
        kube = Kube(client, qps=0)
        config = render.Config(cluster_domain=args.cluster_domain, gang_scheduling=args.gang_scheduling)
        mpijob = kube.get(MPIJOB, namespace, name)
        job = render.parse_mpijob(mpijob)  # an invalid spec is bad input here: its errors, exit 2
        report = compute(mpijob, live_children(kube, job, config), config, datetime.now(UTC))
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
