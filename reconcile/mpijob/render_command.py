"""`mpijob render -f FILE`: every child manifest of the MPIJobs in FILE (or, with --status, their status).

Offline: no cluster is read. A manifest is judged as the API server would judge its create (strict field
validation and the CRD's schema), then as the operator would. From a checkout,
`python -m reconcile.cli render` runs it too. The SSH Secret's keys are masked unless --show-secrets asks
for them; the mask is not base64, so a masked output applied by mistake is refused.

exit codes: 0 rendered; 2 bad input (flags, files, YAML, a manifest the API server or the operator would
refuse); 3 an internal error of this program.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import attrs
import yaml

from reconcile.engine.redact import hide_object
from render import names
from render.admission import admit, normal_path
from render.api import Config, SSHKey
from render.bounds import CLUSTER_DOMAIN_MAX
from render.core import render
from render.errors import FieldError, ValidationError, one_line, quote
from render.keys import generate_ssh_key, load_ssh_key
from render.observed import Observed, check_objects
from render.parse import MAX_DEPTH, too_deep
from render.status import status
from render.timeutil import parse_time
from render.yamlio import Loader, dump, dump_all

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
STDIN = "STDIN"  # how kubectl names standard input in its messages
EXIT_INVALID = 2
EXIT_INTERNAL = 3
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_SKIPPED_NAMED = 8


def version() -> str:
    try:
        return metadata.version("mpijob-operator")
    except metadata.PackageNotFoundError:  # a checkout that was never installed
        return "unknown"


def _parser(prog: str = "mpijob render") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("file", nargs="?", help="as -f FILE")
    add_filename_flag(p, "manifest file or directory (its .yaml, .yml and .json files); - for stdin")
    p.add_argument("-R", "--recursive", action="store_true", help="read the directories of -f recursively")
    p.add_argument(
        "-n",
        "--namespace",
        default="",
        help="namespace of MPIJobs that name none (default: default); one that names another is an error",
    )
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")
    p.add_argument(
        "--validate",
        choices=("strict", "warn", "ignore", "true", "false"),
        default="strict",
        help="unknown fields, as kubectl: strict (true) refuses them, warn prints a warning and drops them, "
        "ignore (false) drops them silently; the schema's other rules apply always",
    )
    p.add_argument("--observed", help="live objects: a YAML list, a kind: List, or multiple documents")
    p.add_argument("--status", action="store_true", help="print the status that would be written")
    p.add_argument("--now", help="RFC 3339 time render and status see (default: the current time)")
    p.add_argument("--ssh-key", help="PEM ECDSA private key to use when no live SSH Secret exists")
    p.add_argument(
        "--show-secrets", action="store_true", help="print the SSH Secret's keys (masked by default)"
    )
    p.add_argument("--cluster-domain", default="", help="cluster domain appended to host names")
    p.add_argument(
        "--gang-scheduling",
        default="",
        help='"kubernetes" (the Workload API), "volcano" or a scheduler-plugins scheduler name',
    )
    p.add_argument(
        "--workload-api",
        default=names.WORKLOAD_API_VERSIONS[0],
        metavar="GROUP/VERSION",
        help="with --gang-scheduling=kubernetes: the Workload API version the cluster serves, as the "
        f'operator discovers it (default {names.WORKLOAD_API_VERSIONS[0]}; "" for none)',
    )
    p.add_argument(
        "--force-delete-lost-workers-after",
        type=int,
        default=0,
        metavar="SECONDS",
        help="as the operator's flag: the status then says when a lost node's workers are force-deleted",
    )
    p.add_argument("--version", action="version", version=f"{prog} {version()} ({names.API_VERSION})")
    return p


class InputProblem(Exception):
    """Bad input found before any MPIJob is judged: one line per problem."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = [one_line(line) for line in lines]
        super().__init__("; ".join(self.lines))


@attrs.frozen
class Item:
    """One object of the input and where it came from."""

    source: str
    index: int  # position among all items of the input
    obj: object

    def label(self) -> str:
        """namespace/name, or the item's position in the input when it has no name."""
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            return quote(f"{meta.get('namespace') or 'default'}/{meta['name']}")[1:-1]  # escaped, one line
        return f"item {self.index}"


def with_cli_defaults(obj: object, namespace: str = "") -> object:
    """As kubectl would: the namespace of -n, else `default`; a placeholder uid so ownerReferences are
    complete."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        return obj
    meta = dict(obj.get("metadata") or {})
    if not meta.get("namespace"):
        meta["namespace"] = namespace or "default"
    meta.setdefault("uid", PLACEHOLDER_UID)
    return {**obj, "metadata": meta}


def run(
    mpijob: object, objects: list[dict[str, Any]], now: datetime, key: SSHKey | None, config: Config
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Children and status for one input; raises ValidationError for an invalid MPIJob."""
    observed = Observed.from_objects(objects, now=now, fresh_ssh_key=key)
    children = render(mpijob, observed, config)  # type: ignore[arg-type]
    return children, status(mpijob, observed, config)  # type: ignore[arg-type]


def main(argv: list[str] | None = None, prog: str = "mpijob render") -> int:
    args = _parser(prog).parse_args(argv)
    if args.file:
        args.filename.insert(0, args.file)
    try:
        return _main(args)
    except InputProblem as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return EXIT_INVALID
    except ValidationError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:  # an unreadable file: bad input like any other, on one line
        print(one_line(f"error: {exc}"), file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:  # a bug of ours: one line, never a traceback, and its own exit code
        print(
            one_line(f"error: internal error, please report it: {type(exc).__name__}: {exc}"), file=sys.stderr
        )
        return EXIT_INTERNAL


def _main(args: argparse.Namespace) -> int:
    if not args.filename:
        raise InputProblem(["error: no input: give FILE or -f FILE (- for standard input)"])
    items: list[Item] = []
    for source, text in read_sources(args.filename, args.recursive):
        items += [Item(source, len(items) + i, obj) for i, obj in enumerate(load_items(text, source))]
    mpijobs, skipped = _select(items)
    objects = _observed(args.observed) if args.observed else []
    now, key, config = _settings(args)
    strict, warn = args.validate in ("strict", "true"), args.validate == "warn"
    children: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    errors: list[str] = []
    warnings: list[str] = []
    for item in mpijobs:
        prefix = f"{item.label()}: " if len(mpijobs) > 1 else ""
        type_meta = _type_meta_errors(item.obj)
        if type_meta:  # another kind, or another API's MPIJob: its other fields mean other things
            errors += [prefix + line for line in type_meta]
            continue
        job_errors, job_warnings, obj, judged = _admit(item.obj, strict=strict, warn=warn)
        if not job_errors:
            job_errors = namespace_mismatch(text_field(metadata_of(obj), "namespace"), args.namespace)
        rendered = None
        try:
            rendered = run(with_cli_defaults(obj, args.namespace), objects, now, key, config)
        except ValidationError as exc:
            job_errors += [str(e) for e in exc.errors if normal_path(e.path) not in judged]
        warnings += [prefix + line for line in job_warnings]
        if job_errors or rendered is None:
            errors += [prefix + line for line in job_errors]
            continue
        children += rendered[0]
        statuses.append(rendered[1])
    for line in warnings:
        print(one_line(line), file=sys.stderr)
    if skipped:
        print(_skipped_line(skipped), file=sys.stderr)
    if errors:
        for line in errors:
            print(one_line(line), file=sys.stderr)
        return EXIT_INVALID
    if not args.show_secrets:
        children = [dict(hide_object(child)) for child in children]
    sys.stdout.write(_output(statuses if args.status else children, args.output, args.status))
    return 0


def _admit(obj: object, *, strict: bool, warn: bool) -> tuple[list[str], list[str], object, set[str]]:
    """What the API server would say of creating `obj`: errors, warnings, the object it would keep, and
    the (normalized) paths its errors name."""
    if not isinstance(obj, dict) or too_deep(obj) is not None:
        return [], [], obj, set()  # parse_mpijob names the problem
    verdict = admit(obj)
    unknown = [f"unknown field {json.dumps(path)}" for path in verdict.unknown]
    errors = [str(e) for e in verdict.errors]
    if strict:
        return unknown + errors, [], verdict.pruned, verdict.paths
    return errors, [f"Warning: {line}" for line in unknown] if warn else [], verdict.pruned, verdict.paths


def _type_meta_errors(obj: object) -> list[str]:
    """Another kind, or another API's MPIJob (the Training Operator's kubeflow.org/v1): one line says so."""
    if not isinstance(obj, dict):
        return []
    for field, want in (("kind", names.KIND), ("apiVersion", names.API_VERSION)):
        value = obj.get(field)
        if value is not None and value != want:
            return [f"{field}: Unsupported value: {quote(value)}: supported values: {quote(want)}"]
    return []


def namespace_mismatch(own: str, flag: str) -> list[str]:
    """kubectl's rule, in its words: an object's own namespace must be the one -n names."""
    if flag and own and own != flag:
        return [
            f"error: the namespace from the provided object {json.dumps(own)} does not match the namespace "
            f"{json.dumps(flag)}. You must pass '--namespace={own}' to perform this operation."
        ]
    return []


def add_filename_flag(parser: argparse.ArgumentParser, help_text: str) -> None:
    """kubectl's -f: repeatable, - for stdin."""
    parser.add_argument(
        "-f", "--filename", action="append", default=[], metavar="FILE", help=f"{help_text}; repeatable"
    )


def read_sources(paths: list[str], recursive: bool) -> Iterator[tuple[str, str]]:
    for path in paths:
        if path == "-":
            yield STDIN, sys.stdin.read()
        elif os.path.isdir(path):
            files = sorted(_manifests_in(path, recursive))
            if not files:
                raise InputProblem([f"error: {path}: no .yaml, .yml or .json file in the directory"])
            for name in files:
                yield name, _read(name)
        else:
            yield path, _read(path)


def _manifests_in(directory: str, recursive: bool) -> Iterator[str]:
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir():
            if recursive:
                yield from _manifests_in(entry.path, recursive)
        elif entry.name.endswith(MANIFEST_SUFFIXES):
            yield entry.path


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise InputProblem([f"error: {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except OSError as exc:
        raise InputProblem([f"error: {path}: {exc.strerror or exc}"]) from None


def load_documents(text: str, source: str) -> list[object]:
    """The non-empty YAML (or JSON) documents of one file; a syntax error names the file and the line."""
    stream = io.StringIO(text)
    stream.name = source  # marks in PyYAML's errors name the stream
    try:
        return [d for d in yaml.load_all(stream, Loader=Loader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        raise InputProblem([f"{source}: {_yaml_problem(exc)}"]) from None
    except yaml.YAMLError as exc:
        raise InputProblem([f"{source}: {exc}"]) from None
    except RecursionError:
        raise InputProblem([f"{source}: nested deeper than {MAX_DEPTH} levels"]) from None


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = f"{where}{exc.problem or exc.context or 'invalid YAML'}"
    if exc.context and exc.problem and exc.context_mark is not None:
        text += f" ({exc.context} at line {exc.context_mark.line + 1})"
    return text


def load_items(text: str, source: str) -> list[object]:
    """The objects of one file: documents, with YAML lists and `kind: List`s flattened."""
    out: list[object] = []
    for doc in load_documents(text, source):
        if isinstance(doc, list):
            out += doc
        elif _is_list(doc):
            out += doc["items"]  # type: ignore[index]
        else:
            out.append(doc)
    return out


def _is_list(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list)


def _select(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """The MPIJobs to judge, and the other objects of a bundle (skipped). A lone object is always judged:
    one that is no MPIJob is an error, not a skip."""
    if not items:
        raise InputProblem(["error: no objects passed to render"])
    if len(items) == 1:
        return items, []
    mpijobs = [i for i in items if _kind(i.obj) in ("", names.KIND)]
    skipped = [i for i in items if _kind(i.obj) not in ("", names.KIND)]
    if not mpijobs:
        raise InputProblem([f"error: no MPIJob in the input; {_skipped_line(skipped)}"])
    return mpijobs, skipped


def metadata_of(obj: object) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def text_field(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _kind(obj: object) -> str:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else ""


def _skipped_line(skipped: list[Item]) -> str:
    """kubectl's names: `configmap/pi-input, deployment.apps/mpi-operator`."""
    refs = []
    for item in skipped:
        obj = item.obj if isinstance(item.obj, dict) else {}
        group = text_field(obj, "apiVersion").rpartition("/")[0]
        name = text_field(metadata_of(obj), "name") or "?"
        refs.append(f"{_kind(obj).lower()}{'.' + group if group else ''}/{name}")
    shown = ", ".join(refs[:MAX_SKIPPED_NAMED])
    more = f" and {len(refs) - MAX_SKIPPED_NAMED} more" if len(refs) > MAX_SKIPPED_NAMED else ""
    what = "object that is not an MPIJob" if len(refs) == 1 else "objects that are not MPIJobs"
    return one_line(f"skipped {len(refs)} {what}: {shown}{more}")


def _observed(path: str) -> list[dict[str, Any]]:
    """Live objects from a file; anything that is not a named Kubernetes object is an error, not nothing."""
    source, text = next(read_sources([path], recursive=False))
    objects = load_items(text, source)
    deep = too_deep(objects)
    if deep is not None:
        raise ValidationError([FieldError(f"--observed{deep}", f"nested deeper than {MAX_DEPTH} levels")])
    shape = check_objects(objects, "--observed")
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            continue
        if not isinstance(obj.get("kind"), str) or not obj["kind"]:
            shape.append(FieldError(f"--observed[{i}].kind", "Required value"))
        meta = obj.get("metadata") or {}
        if isinstance(meta, dict) and (not isinstance(meta.get("name"), str) or not meta["name"]):
            shape.append(FieldError(f"--observed[{i}].metadata.name", "Required value"))
    if shape:
        raise ValidationError(shape)
    return objects  # type: ignore[return-value]  # every item is a dict: check_objects said so


def _settings(args: argparse.Namespace) -> tuple[datetime, SSHKey, Config]:
    now = datetime.now(UTC)
    if args.now:
        parsed = parse_time(args.now)
        if parsed is None:
            raise ValidationError(
                [FieldError("--now", f"Invalid value: {quote(args.now)}: must be RFC 3339")]
            )
        now = parsed
    if args.ssh_key:
        try:
            key = load_ssh_key(_read(args.ssh_key))
        except ValueError as exc:
            raise InputProblem([f"error: {args.ssh_key}: {exc}"]) from None
    else:
        key = generate_ssh_key()
    if len(args.cluster_domain) > CLUSTER_DOMAIN_MAX:
        raise ValidationError(
            [FieldError("--cluster-domain", f"Too long: must have at most {CLUSTER_DOMAIN_MAX} characters")]
        )
    if args.force_delete_lost_workers_after < 0:
        raise ValidationError([FieldError("--force-delete-lost-workers-after", "must be >= 0 (0: never)")])
    if args.workload_api and args.workload_api not in names.WORKLOAD_API_VERSIONS:
        known = ", ".join(names.WORKLOAD_API_VERSIONS)
        raise ValidationError(
            [FieldError("--workload-api", f"Unsupported value: {args.workload_api!r}: {known}")]
        )
    return (
        now,
        key,
        Config(
            cluster_domain=args.cluster_domain,
            gang_scheduling=args.gang_scheduling,
            workload_api=args.workload_api if args.gang_scheduling == names.KUBERNETES_GANG else "",
            force_delete_lost_workers_after=args.force_delete_lost_workers_after,
        ),
    )


def _output(objs: list[dict[str, Any]], fmt: str, statuses: bool) -> str:
    if fmt == "json":
        if len(objs) == 1:
            doc: object = objs[0]
        elif statuses:
            doc = objs
        else:
            doc = {"apiVersion": "v1", "kind": "List", "items": objs}
        return json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=False) + "\n"
    if statuses and len(objs) == 1:
        return dump(objs[0])
    return dump_all(objs)


if __name__ == "__main__":
    sys.exit(main())
