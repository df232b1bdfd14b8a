"""`mpijob plan NAME`: what the operator would do now for a live MPIJob, read-only.

It reads the MPIJob and its children from the API server (GET and LIST only), and prints what the
operator's own ``decide`` makes of them: creates, patches with their JSON patches, deletes, conflicts
(names held by objects the job does not own), plus the status change. It writes nothing. Exit 0 when
the operator would write nothing, 1 when it would (as `kubectl diff`), 2 on bad input (flags, kubeconfig, an
MPIJob that does not exist or is invalid), 3 when the API server could not be asked or this program
failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

import attrs
import jsonpatch
import yaml
from kubernetes.config import ConfigException

import render
from reconcile.engine import managedfields
from reconcile.mpijob.decide import Action, decide, needs_fresh_key
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.policy import CHILD_SELECTOR, gang_resources, reads_priority_classes
from reconcile.mpijob.render_command import (
    EXIT_INVALID,
    InputProblem,
    add_filename_flag,
    load_items,
    metadata_of,
    namespace_mismatch,
    read_sources,
    text_field,
    version,
)
from reconcile.mpijob.workloadapi import served_workload_api
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


def _parser(prog: str = "mpijob plan") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="the MPIJob: NAME or NAMESPACE/NAME")
    add_filename_flag(p, "plan the MPIJobs a manifest file names (as `kubectl get -f`); - for stdin")
    p.add_argument(
        "-n", "--namespace", default="", help="its namespace (default: the kubeconfig's, else default)"
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--cluster-domain", default="", help="as the operator's --cluster-domain")
    p.add_argument("--gang-scheduling", default="", help="as the operator's --gang-scheduling")
    p.add_argument("-o", "--output", choices=("yaml", "json", "text"), default="yaml")
    p.add_argument("--version", action="version", version=f"{prog} {version()} ({names.API_VERSION})")
    return p


def _ours(obj: dict[str, Any], uid: str) -> bool:
    return (controller_ref(obj) or {}).get("uid") == uid


def live_children(kube: Kube, job: Any, config: render.Config) -> list[dict[str, Any]]:
    """What the operator's caches hold for the job: its children, its launcher's pods, any object holding
    a name it wants, and PriorityClasses with gang scheduling."""
    resources = [POD, SERVICE, CONFIGMAP, SECRET, JOB]
    resources += gang_resources(config)
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
    if reads_priority_classes(config):
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


EXIT_FAILED = 3  # the API server could not be asked, or a bug of ours


def main(argv: list[str] | None = None, prog: str = "mpijob plan") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        targets = _targets(args)
    except InputProblem as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return EXIT_INVALID
    if not targets:
        print("error: give NAME or -f FILE", file=sys.stderr)
        return EXIT_INVALID
    try:
        client = api_client(args.kubeconfig, "")
        default_ns = args.namespace or _context_namespace(args.kubeconfig) or "default"
        kube = Kube(client, qps=0)
        config = render.Config(
            cluster_domain=args.cluster_domain,
            gang_scheduling=args.gang_scheduling,
            workload_api=served_workload_api(kube) if args.gang_scheduling == names.KUBERNETES_GANG else "",
        )
        reports = []
        for namespace, name in targets:
            mpijob = kube.get(MPIJOB, namespace or default_ns, name)
            job = render.parse_mpijob(mpijob)  # an invalid spec is bad input here: its errors, exit 2
            reports.append(compute(mpijob, live_children(kube, job, config), config, datetime.now(UTC)))
    except render.ValidationError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID if err.status == 404 else EXIT_FAILED
    except ConfigException as err:  # no or a broken kubeconfig
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as err:  # the API server unreachable, or a bug of ours
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    sys.stdout.write(_output(reports, args.output))
    return 1 if any(r["writes"] for r in reports) else 0


def _targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(namespace, name) of each MPIJob to plan; an empty namespace means -n's or the kubeconfig's."""
    out = []
    if args.name:
        namespace, _, name = args.name.rpartition("/")
        out.append((namespace, name))
    if args.filename:
        for source, text in read_sources(args.filename, recursive=False):
            for obj in load_items(text, source):
                if not isinstance(obj, dict) or obj.get("kind") not in (None, names.KIND):
                    continue
                meta = metadata_of(obj)
                name, own = text_field(meta, "name"), text_field(meta, "namespace")
                if not name:
                    raise InputProblem([f"error: {source}: an MPIJob without metadata.name"])
                mismatch = namespace_mismatch(own, args.namespace)
                if mismatch:
                    raise InputProblem(mismatch)
                out.append((own, name))
    return out


def _output(reports: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "text":
        lines = []
        for report in reports:
            lines += [f"{report['mpijob']}:", report["summary"]]
            lines += [f"status: {op['op']} {op['path']}" for op in report["status"]]
        return "\n".join(lines) + "\n"
    if fmt == "json":
        doc: object = reports[0] if len(reports) == 1 else reports
        return json.dumps(doc, indent=4, ensure_ascii=False) + "\n"
    return yaml.safe_dump_all(reports, sort_keys=False, width=120)


def _context_namespace(kubeconfig: str) -> str:
    from kubernetes import config as kubeconfig_module

    try:
        _, current = kubeconfig_module.list_kube_config_contexts(config_file=kubeconfig or None)
    except Exception:
        return ""
    return str((current or {}).get("context", {}).get("namespace") or "")


if __name__ == "__main__":
    sys.exit(main())
