"""L2, after every other test of the run: the operator's ServiceAccount used every verb of every resource
its shipped roles grant, and the API server refused it nothing.

The requests come from the audit logs of the e2e tier's cluster and of the chaos tier's (each records
every request of that account, reads included: localcluster/rbacuse.py). docs/operations.md lists each
grant with the test it was first seen in; this test prints that table.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from localcluster import LocalCluster
from localcluster.rbacuse import Grant, granted, usage
from tests.e2e.support import shipped
from tests.utils import in_ci, runs_last, session_requests

pytestmark = pytest.mark.l2

# Not a request: the OwnerReferencesPermissionEnforcement admission plugin (on in the e2e cluster) lets
# only who may update an owner's finalizers set blockOwnerDeletion on its children, which ours carry.
# test_e2e_rbac_needed.py shows a child create refused without it.
ADMISSION_ONLY = {("kubeflow.org", "mpijobs/finalizers", "update")}
# Kubernetes' own PodGroup, made with the Workload API from scheduling.k8s.io/v1alpha2 (1.36) on; the
# local clusters serve v1alpha1 (1.35), where the gang is a Workload alone.
NOT_SERVED = {
    ("scheduling.k8s.io", "podgroups", v) for v in ("get", "list", "watch", "create", "patch", "delete")
}
# The tiers whose runs the check reads; without them in this run it has nothing to judge.
TIERS = ("e2e", "chaos")


def shipped_grants() -> set[Grant]:
    roles = (shipped("ClusterRole", "mpi-operator"), shipped("Role", "mpi-operator-leader-election"))
    return granted(rule for role in roles for rule in role["rules"])


def _table(seen_in: dict[Grant, list[str]], counts: dict[Grant, int]) -> str:
    lines = [f"{'verb':8} {'resource':40} {'requests':>8}  first seen in"]
    for g in sorted(seen_in, key=lambda g: (g[0], g[1], g[2])):
        resource = f"{g[1]}.{g[0]}" if g[0] else g[1]
        lines.append(f"{g[2]:8} {resource:40} {counts[g]:8}  {seen_in[g][0]}")
    return "\n".join(lines)


@runs_last
def test_every_shipped_grant_was_used_and_nothing_was_refused(
    request: pytest.FixtureRequest, e2e_cluster: LocalCluster
) -> None:
    ran = {item.path.parent.name for item in request.session.items}
    if not in_ci() and not all(t in ran for t in TIERS):
        pytest.skip(f"judges the whole run: run it with the {' and '.join(TIERS)} tiers")
    records = session_requests(request.config, e2e_cluster.audit_log)
    used = usage(r for _, r in records)
    seen_in: dict[Grant, list[str]] = defaultdict(list)
    for test, r in records:
        if not r.forbidden and test not in seen_in[r.grant]:
            seen_in[r.grant].append(test)
    print("\n" + _table(seen_in, used.seen))
    print(f"refused (a refusal of a grant also allowed: RBAC's cache after an apply): {dict(used.refused)}")

    missing = sorted(set(used.refused) - set(used.seen))
    assert not missing, f"requests the shipped roles refused: {missing}"
    grants = shipped_grants()
    unused = sorted(grants - ADMISSION_ONLY - set(NOT_SERVED) - set(used.seen))
    assert not unused, f"granted, never requested in this run: {unused}"
    beyond = sorted(set(used.seen) - grants)
    assert not beyond, f"requested without a grant (and yet answered): {beyond}"
