"""Reading one user's requests from an audit log, and the grants of RBAC rules."""

from __future__ import annotations

import json

import yaml

from localcluster.cluster import AUDIT_POLICY
from localcluster.rbacuse import OPERATOR_USER, USAGE_RULE, granted, requests, usage, with_usage


def event(
    verb: str, resource: str, *, group: str = "", sub: str = "", user: str = OPERATOR_USER, **kw
) -> str:
    ref = {"resource": resource, "apiGroup": group, **({"subresource": sub} if sub else {})}
    decision = kw.pop("decision", "allow")
    return json.dumps(
        {
            "stage": kw.pop("stage", "ResponseComplete"),
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "annotations": {"authorization.k8s.io/decision": decision},
            "requestReceivedTimestamp": "2026-12-07T10:00:00.000001Z",
            **kw,
        }
    )


def test_requests_are_grants_of_one_user_and_refusals_are_authorizations():
    lines = [
        event("list", "pods"),
        event("update", "mpijobs", group="kubeflow.org", sub="status"),
        event("create", "configmaps", decision="forbid"),
        event("create", "pods", user="someone-else"),
        event("get", "pods", stage="ResponseStarted"),
        json.dumps({"stage": "ResponseComplete", "verb": "get", "user": {"username": OPERATOR_USER}}),
        '{"cut short by a kil',
    ]
    used = usage(requests(lines))
    assert dict(used.seen) == {("", "pods", "list"): 1, ("kubeflow.org", "mpijobs/status", "update"): 1}
    assert dict(used.refused) == {("", "configmaps", "create"): 1}


def test_a_403_from_admission_is_no_refusal_of_the_role():
    # a create in a namespace being deleted: authorization allowed it
    used = usage(requests([event("create", "pods", decision="allow", responseStatus={"code": 403})]))
    assert not used.refused and used.seen[("", "pods", "create")] == 1


def test_granted_expands_rules():
    rules = [{"apiGroups": ["", "batch"], "resources": ["jobs"], "verbs": ["get", "list"]}]
    assert granted(rules) == {
        ("", "jobs", "get"),
        ("", "jobs", "list"),
        ("batch", "jobs", "get"),
        ("batch", "jobs", "list"),
    }


def test_with_usage_adds_the_operator_rule_before_the_catch_all():
    rules = yaml.safe_load(with_usage(AUDIT_POLICY))["rules"]
    assert rules[-2:] == [USAGE_RULE, {"level": "None"}]
    assert rules[:-2] == yaml.safe_load(AUDIT_POLICY)["rules"][:-1]
