#!/usr/bin/env python3
"""Regenerates deploy/crd/kubeflow.org_mpijobs.yaml and render/mpijob.schema.json, the CRD's schema that
`mpijob render` validates against (or checks both for drift with --check).

The pod template schema comes from the Kubernetes OpenAPI v3 spec of the version pinned in
deploy/local/versions.env; see tools/crdgen/.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.crdgen.build import CRD_PATH, SCHEMA_PATH, k8s_src_dir, render_crd_yaml, render_schema_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k8s-src", type=Path, help="k8s.io/kubernetes module dir (default: build.sh)")
    parser.add_argument("--out", type=Path, default=CRD_PATH, help="output file, '-' for stdout")
    parser.add_argument("--check", action="store_true", help="fail if the output file differs")
    args = parser.parse_args(argv)

    text = render_crd_yaml(args.k8s_src or k8s_src_dir())
    if str(args.out) == "-":
        sys.stdout.write(text)
        return 0
    outputs = [(args.out, text)]
    if args.out == CRD_PATH:
        outputs.append((SCHEMA_PATH, render_schema_json(text)))
    if args.check:
        stale = 0
        for path, want in outputs:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current == want:
                continue
            stale = 1
            diff = difflib.unified_diff(
                current.splitlines(), want.splitlines(), str(path), "generated", lineterm="", n=1
            )
            sys.stderr.write(
                "\n".join(list(diff)[:60]) + f"\n{path} is stale: run python deploy/gen_crd.py\n"
            )
        return stale
    for path, want in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(want, encoding="utf-8")
        print(f"wrote {path} ({len(want.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
