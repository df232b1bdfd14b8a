"""`mpijob render FILE`: print every child manifest of an MPIJob (or, with --status, its status) as YAML.

Offline and pure: no cluster is read. `python -m render` runs it too."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import yaml

from render.api import Config, SSHKey
from render.bounds import CLUSTER_DOMAIN_MAX
from render.core import render
from render.errors import FieldError, ValidationError, one_line, quote
from render.keys import generate_ssh_key, load_ssh_key
from render.observed import Observed, check_objects
from render.parse import MAX_DEPTH, too_deep
from render.status import status
from render.timeutil import parse_time
from render.yamlio import Loader, dump, dump_all, load_objects

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


def _parser(prog: str = "mpijob render") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__)
    p.add_argument("file", help="MPIJob manifest (YAML or JSON); - for stdin")
    p.add_argument("--observed", help="live objects: a YAML list, a kind: List, or multiple documents")
    p.add_argument("--status", action="store_true", help="print the status that would be written")
    p.add_argument("--now", help="RFC 3339 time render and status see (default: the current time)")
    p.add_argument("--ssh-key", help="PEM ECDSA private key to use when no live SSH Secret exists")
    p.add_argument("--cluster-domain", default="", help="cluster domain appended to host names")
    p.add_argument("--gang-scheduling", default="", help='"volcano" or a scheduler-plugins scheduler name')
    return p


def with_cli_defaults(obj: object) -> object:
    """As kubectl would: namespace `default`; a placeholder uid so ownerReferences are complete."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        return obj
    meta = dict(obj.get("metadata") or {})
    meta.setdefault("namespace", "default")
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
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        mpijobs = [with_cli_defaults(obj) for obj in load_mpijobs(text)]
        objects: list[dict[str, Any]] = []
        if args.observed:
            with open(args.observed, encoding="utf-8") as f:
                text = f.read()
            try:
                objects = load_objects(text)
            except (yaml.YAMLError, RecursionError) as exc:
                raise ValidationError([FieldError("--observed", str(exc).replace("\n", " "))]) from None
            deep = too_deep(objects)
            if deep is None and (shape := check_objects(objects, "--observed")):
                raise ValidationError(shape)
            if deep is not None:
                raise ValidationError(
                    [FieldError(f"--observed{deep}", f"nested deeper than {MAX_DEPTH} levels")]
                )
        now = datetime.now(UTC)
        if args.now:
            parsed = parse_time(args.now)
            if parsed is None:
                raise ValidationError(
                    [FieldError("--now", f"Invalid value: {quote(args.now)}: must be RFC 3339")]
                )
            now = parsed
        if args.ssh_key:
            with open(args.ssh_key, encoding="utf-8") as f:
                key = load_ssh_key(f.read())
        else:
            key = generate_ssh_key()
        if len(args.cluster_domain) > CLUSTER_DOMAIN_MAX:
            raise ValidationError(
                [
                    FieldError(
                        "--cluster-domain", f"Too long: must have at most {CLUSTER_DOMAIN_MAX} characters"
                    )
                ]
            )
        config = Config(cluster_domain=args.cluster_domain, gang_scheduling=args.gang_scheduling)
        children, statuses, errors = [], [], []
        for index, mpijob in enumerate(mpijobs):  # a stream renders every MPIJob; errors name the job
            try:
                kids, st = run(mpijob, objects, now, key, config)
            except ValidationError as exc:
                prefix = f"{_job_name(mpijob, index)}: " if len(mpijobs) > 1 else ""
                errors += [prefix + line for line in exc.lines()]
                continue
            children += kids
            statuses.append(st)
        if errors:
            for line in errors:
                print(line, file=sys.stderr)
            return 2
    except ValidationError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        # unreadable files and key material: bad input like any other, on one line
        print(one_line(f"error: {exc}"), file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours; still one line and the input-error code, never a traceback
        print(one_line(f"error: internal: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 2
    if args.status:
        sys.stdout.write(dump(statuses[0]) if len(statuses) == 1 else dump_all(statuses))
    else:
        sys.stdout.write(dump_all(children))
    return 0


def load_mpijobs(text: str) -> list[object]:
    """The MPIJobs of a file: one document, or a stream of several, a YAML list or a `kind: List`."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise ValidationError([FieldError("<yaml>", str(exc).replace("\n", " "))]) from None
    except RecursionError:
        raise ValidationError([FieldError("<yaml>", f"nested deeper than {MAX_DEPTH} levels")]) from None
    if len(docs) == 1 and not (isinstance(docs[0], list) or _is_list(docs[0])):
        return docs
    out: list[object] = []
    for doc in docs:
        out += doc if isinstance(doc, list) else doc["items"] if _is_list(doc) else [doc]
    if not out:
        raise ValidationError([FieldError("<yaml>", "no MPIJob in the input")])
    return out


def _is_list(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list)


def _job_name(obj: object, index: int) -> str:
    """namespace/name, or the item's position in the stream when it has no name."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return quote(f"{meta.get('namespace', 'default')}/{meta['name']}")[1:-1]  # escaped, one line
    return f"item {index}"


if __name__ == "__main__":
    sys.exit(main())
