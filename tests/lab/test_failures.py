"""The failures set (`--stages failures`, lab 11): how the sets hold the twins beside
their base stages. The twins themselves run inside test_lab.py's full run, beside the
base stages it runs anyway: test_each_failure_twin_fails_where_its_base_stage_does_not
(5k's load against stage 5: test_lab_stops.py, test_ctrl_c_in_a_later_repeat...). The
crash twins (8k, 9k) need no base stage to judge them: tests/lab/test_crash.py runs them.
"""

from __future__ import annotations

import pytest

from benchmarks import stages


def test_sets_main_line_twins_with_their_bases_and_everything():
    assert [s.key for s in stages.select("main")] == [s.key for s in stages.MAIN]
    assert all(s.twin_of is None for s in stages.MAIN) and stages.FAILURES
    # every twin is in a set that is not the main line, and runs there with its base
    for twin in (s for s in stages.STAGES if s.twin_of):
        assert twin.set_name != "main", twin.key
        assert {twin.key, twin.twin_of} <= {s.key for s in stages.select(twin.set_name)}
    assert [s.key for s in stages.select("everything")] == [
        s.key for s in stages.select(",".join(stages.SETS))]
    assert len(stages.select("everything")) == len(stages.STAGES)
    with pytest.raises(KeyError, match=r"`all` is gone: `main` is the main line"):
        stages.select("all")
    keys = [s.key for s in stages.select("failures")]
    for twin in stages.FAILURES:  # after its base, with only its base's other twins between
        between = keys[keys.index(twin.twin_of) + 1:keys.index(twin.key)]
        assert all(stages.get(k).twin_of == twin.twin_of for k in between), keys
    with pytest.raises(KeyError, match=r"--stages 0,0t, or --stages failures"):
        stages.select("0t")
