"""The tier table of docs/testing.md is what tools/tiertable.py generates from pyproject.toml's markers and
pytest's collection: a new marker, a tier's tests in another directory, or a marker description that names
the wrong directories fails here. `.venv/bin/python -m tools.tiertable` rewrites the table."""

from __future__ import annotations

import re

import pytest

from tools import tiertable
from tools.tiertable import Marker, Place, TierTableError


@pytest.fixture(scope="module")
def repo_tiers() -> list[tiertable.Tier]:
    return tiertable.generate()  # one collection of tests/ by a child pytest, a few seconds


def test_the_page_holds_the_generated_table(repo_tiers):
    page = tiertable.PAGE.read_text(encoding="utf-8")
    assert tiertable.rewrite(page, tiertable.table(repo_tiers)) == page, (
        "docs/testing.md's tier table is stale: run .venv/bin/python -m tools.tiertable"
    )


def test_every_tier_is_described_under_the_table(repo_tiers):
    page = tiertable.PAGE.read_text(encoding="utf-8")
    after = page.split(tiertable.END, 1)[1].split("\n## ", 1)[0]
    described = re.findall(r"^- \*\*(.+?)\*\*", after, re.M)
    assert described == [t.name for t in repo_tiers], "one `- **Tier**` line per tier, in the table's order"


def test_the_repository_has_its_base_tiers(repo_tiers):
    by_name = {t.name: t for t in repo_tiers}
    assert by_name["L0"].marker == "" and by_name["L0"].skipped == "no"
    assert [p.directory for p in by_name["L0"].places] == ["tests/unit"]
    assert by_name["L1"].marker == "l1" and by_name["L1"].places[0].directory == "tests/cluster"
    assert by_name["L3"].skipped == "no"  # it needs root, not the local cluster: --skip-cluster runs it


def test_markers_are_parsed_into_tier_needs_and_directories():
    markers = tiertable.parse_markers(
        [
            "l1: needs a real kube-apiserver and etcd (tier L1)",
            "kueue: real Kueue on an L2 cluster (tests/kueue)",
            "gang: the Workload API (tests/e2e, tests/node)",
            "chaos: an audited L2 cluster under faults (kill -9, fault proxy)",
        ]
    )
    assert markers == [
        Marker("l1", "L1", "a real kube-apiserver and etcd", ()),
        Marker("kueue", "Kueue", "real Kueue on an L2 cluster", ("tests/kueue",)),
        Marker("gang", "Gang", "the Workload API", ("tests/e2e", "tests/node")),
        Marker("chaos", "Chaos", "an audited L2 cluster under faults (kill -9, fault proxy)", ()),
    ]
    with pytest.raises(TierTableError, match="not `name: description`"):
        tiertable.parse_markers(["no description"])


MARKERS = tiertable.parse_markers(
    ["l1: needs an API server (tier L1)", "l2: needs a cluster (tier L2)", "chaos: faults (tests/chaos)"]
)


def test_tiers_come_from_the_collected_tests():
    items = [
        ("tests/unit", []),
        ("tests/cluster", ["l1", "parametrize"]),
        ("tests/cluster", ["l1", "l2", "skip"]),
        ("tests/cluster", ["l2", "skip"]),
        ("tests/e2e", ["l2", "skip"]),
        ("tests/chaos", ["chaos", "l2", "skip"]),
    ]
    l0, l1, l2, chaos = tiertable.tiers(MARKERS, items)
    assert (l0.name, l0.needs, l0.places, l0.skipped) == (
        "L0",
        tiertable.NEEDS_L0,
        (Place("tests/unit", ()),),
        "no",
    )
    assert (l1.marker, l1.needs, l1.places, l1.skipped) == (
        "l1",
        "an API server",
        (Place("tests/cluster", ()),),
        "partly",
    )
    # a directory where the tier needs no other marker first; the others with what their tests also carry
    assert l2.places == (Place("tests/cluster", ()), Place("tests/e2e", ()), Place("tests/chaos", ("chaos",)))
    assert (chaos.name, chaos.places, chaos.skipped) == ("Chaos", (Place("tests/chaos", ("l2",)),), "yes")
    text = tiertable.table([l0, l1, l2, chaos])
    assert '`-m "not (l1 or l2 or chaos)"` selects L0' in text
    assert (
        "| L2 | `l2` | a cluster | `tests/cluster`, `tests/e2e`, `tests/chaos` (also `chaos`) | yes |" in text
    )


def test_a_description_naming_other_directories_fails():
    items = [("tests/unit", []), ("tests/cluster", ["l1"]), ("tests/e2e", ["l2"]), ("tests/e2e", ["chaos"])]
    with pytest.raises(
        TierTableError, match="marker 'chaos' names tests/chaos, but its tests live in tests/e2e"
    ):
        tiertable.tiers(MARKERS, items)


def test_a_marker_without_tests_fails():
    with pytest.raises(TierTableError, match="no test carries the marker 'chaos'"):
        tiertable.tiers(MARKERS, [("tests/unit", []), ("tests/cluster", ["l1"]), ("tests/e2e", ["l2"])])


def test_rewrite_replaces_only_the_block():
    page = f"# T\n\nabove\n{tiertable.BEGIN}\nold\n{tiertable.END}\nbelow\n"
    assert (
        tiertable.rewrite(page, "new\n") == f"# T\n\nabove\n{tiertable.BEGIN}\nnew\n{tiertable.END}\nbelow\n"
    )
    with pytest.raises(TierTableError):
        tiertable.rewrite("# no block\n", "new\n")
