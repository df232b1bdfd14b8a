"""Golden cases: render, status, events and TTL of every golden/<case> must match the files exactly.

`pytest tests/unit/test_golden.py --update-golden` rewrites them; review the diff before committing.
"""

import pytest

from tests.unit.golden_cases import GOLDEN, OUTPUTS, cases, produce


def test_there_are_cases():
    assert len(cases()) >= 25


@pytest.mark.parametrize("case", cases())
def test_golden(case, update_golden):
    got = produce(case)
    d = GOLDEN / case
    if update_golden:
        for name in OUTPUTS:
            path = d / name
            if name in got:
                path.write_text(got[name])
            elif path.exists():
                path.unlink()
        return
    for name in OUTPUTS:
        path = d / name
        if name in got:
            assert path.exists(), f"{path} is missing; run pytest --update-golden"
            assert got[name] == path.read_text(), (
                f"{case}/{name} drifted; run pytest --update-golden and review"
            )
        else:
            assert not path.exists(), f"{path} should not exist"
