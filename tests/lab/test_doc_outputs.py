"""Captured outputs in the exercises are what the current code prints.

A ```text block right after a ```bash block is that block's output. Where the
program decides the output without load, it is compared with the program now:
the stage list (`lab list`), a host's sysctls (from the registry and sysctl/),
lines of a stage's Nginx config (the same grep on a freshly rendered one: the main
nginx.conf or the stage's conf.d file).
Every captured line must be there, in order; `...` stands for lines left out.
The outputs of `make lab` (measurements) are compared by shape with a real run
in tests/lab/test_lab.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import block_commands, docs, fenced_blocks, rel

from benchmarks import stages
from benchmarks.analysis import reference, report
from benchmarks.sandbox import nginx_conf

ROOT = stages.ROOT
UP = re.compile(r"python -m benchmarks\.lab up (\S+)")
SYSCTL = re.compile(r"python -m benchmarks\.lab exec --host (\w+) -- sysctl ([\w. ]+)$")
NGINX_GREP = re.compile(
    r"grep -nE ('[^']+')\s+results/up/([\w-]+)/nginx/(nginx\.conf|conf\.d/[\w-]+\.conf)$")


def outputs(path: Path):
    """(where, the stage up at that point, the bash block's commands, its output lines)."""
    stage, previous = None, None
    for n, lang, lines in fenced_blocks(path):
        if lang == "bash":
            previous = block_commands(path, n, lines)
            for c in previous:
                if UP.search(c.text):
                    stage = stages.get(UP.search(c.text).group(1))
        elif lang == "text" and previous is not None:
            yield f"{rel(path)}:{n}", stage, previous, lines
            previous = None
        else:
            previous = None


def host_sysctls(stage: stages.Stage, host: str) -> dict[str, str]:
    """What `sysctl` reads on a host of the stage (the lab's own sysctl placement)."""
    if host == "client":
        return stages.client_sysctls()
    if host in stage.connecting_roles:
        return stages.stage_sysctls(stage)
    return stages.sysctl_profile("baseline")


def expected(stage, commands, tmp: Path) -> list[str] | None:
    """What the program prints now for these commands, or None when it is not decided
    without load."""
    lines = []
    for c in commands:
        if c.text == "python -m benchmarks.lab list":
            lines += subprocess.run([sys.executable, "-m", "benchmarks.lab", "list"],
                                    cwd=ROOT, capture_output=True, text=True,
                                    check=True).stdout.splitlines()
        elif SYSCTL.search(c.text):
            host, keys = SYSCTL.search(c.text).groups()
            values = host_sysctls(stage, host)
            lines += [f"{k} = {values[k].replace(' ', chr(9))}" for k in keys.split()]
        elif NGINX_GREP.search(c.text):
            pattern, dirname, name = NGINX_GREP.search(c.text).groups()
            shown = next(s for s in stages.STAGES if s.dirname == dirname)
            apps = [(stages.ADDRESS[role], stages.APP_PORT) for role in shown.app_roles]
            nginx_conf.render(shown.front, tmp / dirname, apps=apps,
                              front=(stages.ADDRESS["proxy"], stages.FRONT_PORT))
            lines += subprocess.run(f"grep -nE {pattern} {tmp / dirname / name}", shell=True,
                                    capture_output=True, text=True).stdout.splitlines()
        else:
            return None
    return lines


def decided(commands) -> bool:
    """Whether the program decides these commands' output without load."""
    return all(c.text == "python -m benchmarks.lab list" or SYSCTL.search(c.text)
               or NGINX_GREP.search(c.text) for c in commands)


CASES = [pytest.param(*case, id=case[0]) for path in docs() for case in outputs(path)
         if decided(case[2])]


def in_order(captured: list[str], actual: list[str]) -> str:
    """The first captured line that is not in `actual` after the one before, or ""."""
    at = 0
    for line in captured:
        if line.strip() == "...":
            continue
        try:
            at = actual.index(line, at) + 1
        except ValueError:
            return line
    return ""


@pytest.mark.parametrize("where,stage,commands,captured", CASES)
def test_captured_output_is_what_the_program_prints(where, stage, commands, captured,
                                                    tmp_path):
    actual = expected(stage, commands, tmp_path)
    missing = in_order(captured, actual)
    assert not missing, f"{where}: the program no longer prints {missing!r}; it prints:\n" + \
        "\n".join(actual)


def test_the_outputs_the_program_decides_are_found():
    """The stage list, two sysctl blocks and two Nginx greps at least."""
    assert len(CASES) >= 5, [c.id for c in CASES]


def test_the_readme_counts_the_checks_of_its_reference_table():
    """README's "every one of the N checks passed": N is the table's checks column, summed."""
    text = (ROOT / "README.md").read_text()
    claimed = int(re.search(r"every one of\s+the (\d+) checks passed", text)[1])
    passed = [tuple(map(int, m)) for m in re.findall(r"\|\s*(\d+)/(\d+)\s*\|\s*$", text, re.M)]
    assert len(passed) == len(reference.captured_stages()), passed
    assert claimed == sum(total for _, total in passed) == sum(ok for ok, _ in passed)


def test_the_readme_reference_table_is_the_captures_own():
    """README's reference table is what the report writes of notebooks/reference-run/
    (`python -c 'from benchmarks.analysis import report, reference;
    print(report.summary_table(reference.DEST))'`): changed by hand, or left behind a new
    capture, it fails here."""
    table = report.summary_table(reference.DEST)
    assert table in (ROOT / "README.md").read_text(), table


def test_check_counts_in_the_labs_are_the_registrys():
    """"`make lab STAGES=X` passes all N checks": N is what benchmarks/stages.py gives
    the stages of X, never a number typed by hand."""
    found = 0
    for path in sorted((ROOT / "exercises").glob("*.md")):
        text = " ".join(path.read_text().split())
        for spec, claimed in re.findall(r"`make lab STAGES=(\S+)` passes all (\d+) checks", text):
            wanted = sum(len(s.checks) for s in stages.select(spec))
            assert int(claimed) == wanted, f"{path.name}: STAGES={spec} has {wanted} checks"
            found += 1
    assert found
