"""What one user asked the API server for, read from its audit log, beside what RBAC rules grant.

A request is a grant triple: (API group, resource or resource/subresource, verb), as an RBAC rule names
it. The audit log of a cluster started with ``USAGE_POLICY`` (or a policy ``with_usage``) holds one
Metadata record per request of the operator's ServiceAccount.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from localcluster.e2e import SA_USER

OPERATOR_USER = SA_USER  # the identity the tiers run the operator under
# The verbs that change objects, as API requests and audit records name them.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
DECISION = "authorization.k8s.io/decision"  # the audit annotation: "allow" or "forbid"

# Every request of the operator's ServiceAccount, reads included, without bodies.
USAGE_RULE: dict[str, Any] = {"level": "Metadata", "users": [OPERATOR_USER]}
NONE_RULE: dict[str, Any] = {"level": "None"}
USAGE_POLICY = yaml.safe_dump(
    {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [USAGE_RULE, NONE_RULE],
    }
)

Grant = tuple[str, str, str]  # (api group, resource[/subresource], verb)


@attrs.frozen
class Request:
    grant: Grant
    forbidden: bool  # refused by authorization (a 403 may also come from admission)
    at: str  # requestReceivedTimestamp, RFC 3339 with microseconds (sorts as text)


@attrs.frozen
class Usage:
    """The requests one user sent, counted by grant: allowed, and refused by authorization."""

    seen: Counter[Grant] = attrs.field(factory=Counter)
    refused: Counter[Grant] = attrs.field(factory=Counter)


def with_usage(policy: str) -> str:
    """``policy`` that also records the operator's requests (its first matching rule still wins)."""
    doc = yaml.safe_load(policy)
    rules = [r for r in doc["rules"] if r != NONE_RULE]
    doc["rules"] = [*rules, USAGE_RULE, NONE_RULE]
    return yaml.safe_dump(doc)


def grant_of(event: Mapping[str, Any]) -> Grant | None:
    """The grant a request needs; None for a non-resource request (/healthz, /version, discovery)."""
    ref = event.get("objectRef")
    if not isinstance(ref, Mapping) or not ref.get("resource"):
        return None
    resource = str(ref["resource"]) + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return str(ref.get("apiGroup") or ""), resource, str(event.get("verb") or "")


def requests(lines: Iterable[str], user: str = OPERATOR_USER) -> list[Request]:
    """The completed resource requests of ``user``. A line a killed API server cut short is skipped."""
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete" or (event.get("user") or {}).get("username") != user:
            continue
        grant = grant_of(event)
        if grant is not None:
            decision = (event.get("annotations") or {}).get(DECISION)
            out.append(Request(grant, decision == "forbid", str(event.get("requestReceivedTimestamp") or "")))
    return out


def usage(requests_: Iterable[Request]) -> Usage:
    seen: Counter[Grant] = Counter()
    refused: Counter[Grant] = Counter()
    for r in requests_:
        (refused if r.forbidden else seen)[r.grant] += 1
    return Usage(seen, refused)


def read_log(path: Path, user: str = OPERATOR_USER) -> list[Request]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8", errors="replace") as f:
        return requests(f, user)


def granted(rules: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """The triples RBAC rules allow (resourceNames narrow a rule to names, not to other triples)."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
    }
