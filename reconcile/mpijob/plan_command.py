"""`mpijob plan NAME`: what the operator would do now for a live MPIJob, read-only.

It reads the MPIJob and its children from the API server (GET and LIST only), and prints what the
operator's own ``decide`` makes of them: creates, patches with their JSON patches (a Secret's values
masked: ``Plan.to_dict``), deletes, conflicts (names held by objects the job does not own), plus the status
change. It writes nothing. Exit 0 when the operator would write nothing, 1 when it would (as `kubectl
diff`), 2 on bad input (flags, kubeconfig, an MPIJob that does not exist or is invalid), 3 when the API
server could not be asked or this program failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import yaml

import render
from reconcile.mpijob.decide import Action, decide
from reconcile.mpijob.kinds import MPIJOB
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.observe import ApiReader, observe
from reconcile.mpijob.policy import child_resources, reads_priority_classes
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
from reconcile.runtime.kube import ApiError, Kube, api_client
from reconcile.runtime.kubeconfig import ConfigError, context_namespace
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


def compute(
    mpijob: dict[str, Any],
    live: list[dict[str, Any]],
    memory: JobMemory,
    config: render.Config,
    now: datetime,
) -> dict:
    """The report of the operator's own decision (reconcile.mpijob.decide) on the state the observe step
    gave (``live``, ``memory``)."""
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


def plan_one(kube: Kube, namespace: str, name: str, config: render.Config, now: datetime) -> dict[str, Any]:
    """Read the MPIJob and observe it as the operator does, through GET and LIST; then ``compute``."""
    mpijob = kube.get(MPIJOB, namespace, name)
    mpijob.setdefault("apiVersion", MPIJOB.api_version)
    mpijob.setdefault("kind", MPIJOB.kind)
    render.parse_mpijob(mpijob)  # an invalid spec is bad input here: its errors, exit 2
    reader = ApiReader(
        kube,
        list(child_resources(config)),
        read_priority=reads_priority_classes(config),
        read_nodes=True,  # as the operator's --watch-nodes, on by default
    )
    live, memory = observe(mpijob, JobMemory(uid=str(mpijob["metadata"].get("uid", ""))), reader, config)
    return compute(mpijob, live, memory, config, now)


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
        default_ns = args.namespace or context_namespace(args.kubeconfig) or "default"
        kube = Kube(client, qps=0)
        config = render.Config(
            cluster_domain=args.cluster_domain,
            gang_scheduling=args.gang_scheduling,
            workload_api=served_workload_api(kube) if args.gang_scheduling == names.KUBERNETES_GANG else "",
        )
        now = datetime.now(UTC)
        reports = [plan_one(kube, namespace or default_ns, name, config, now) for namespace, name in targets]
    except render.ValidationError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID if err.status == 404 else EXIT_FAILED
    except ConfigError as err:  # no or a broken kubeconfig
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


if __name__ == "__main__":
    sys.exit(main())
