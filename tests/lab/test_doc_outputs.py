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

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import block_commands, docs, fenced_blocks, rel

from benchmarks import lab as lab_cli
from benchmarks import stages
from benchmarks.analysis import reference, report
from benchmarks.run import results
from benchmarks.sandbox import hosts, nginx_conf, sandbox

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
            socketio = [(stages.ADDRESS[role], stages.SOCKETIO_PORT)
                        for role in shown.app_roles if shown.socketio_server]
            nginx_conf.render(shown.front, tmp / dirname, apps=apps,
                              front=(stages.ADDRESS["proxy"], stages.FRONT_PORT),
                              socketio=socketio)
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


BANNER = re.compile(r"^stage (\S+) \S+ is up: ")
PID = re.compile(r"ftl-\d+-")


def banners():
    """(where, stage, captured lines) of every `lab up` banner the docs quote."""
    for path in docs():
        for n, lang, lines in fenced_blocks(path):
            heads = [i for i, line in enumerate(lines) if BANNER.match(line)]
            if lang == "text" and heads:
                yield f"{rel(path)}:{n}", stages.get(BANNER.match(lines[heads[0]])[1]), lines


def banner_now(stage: stages.Stage) -> list[str]:
    """What `lab up KEY` prints now, on a 2-core box, with its defaults."""
    box = sandbox.Sandbox(stage, placement=hosts.placement(available=[0, 1]))
    ui = 8089
    return [*lab_cli.up_banner(stage, box, box.url(box.entry_role),
                               results.up_dir(results.RESULTS, stage) / results.SAMPLER_CSV,
                               f"http://127.0.0.1:{ui}", ui), "  Ctrl-C stops it"]


@pytest.mark.parametrize("where,stage,captured",
                         [pytest.param(*b, id=b[0]) for b in banners()])
def test_a_quoted_lab_up_banner_is_what_lab_up_prints(where, stage, captured):
    """Every line a lab quotes of `lab up`'s banner, namespaces' pids aside."""
    actual = [PID.sub("ftl-N-", line) for line in banner_now(stage)]
    quoted = [PID.sub("ftl-N-", line) for line in captured]
    start = next(i for i, line in enumerate(quoted) if BANNER.match(line))
    missing = in_order(quoted[start:], actual)
    assert not missing, f"{where}: lab up no longer prints {missing!r}; it prints:\n" + \
        "\n".join(actual)


CHECK_LINE = re.compile(r"^\s*\[(?:pass|FAIL)\] (.+?): measured ")


def test_every_quoted_check_is_one_the_registry_has():
    """A check line a doc quotes (`[pass] metric op threshold: measured ...`) names a check
    of benchmarks/stages.py with that very threshold: one moved leaves no stale quote."""
    known = {c.expected() for s in stages.STAGES for c in s.checks}
    quoted = [(f"{rel(path)}:{n}", m[1]) for path in docs()
              for n, lang, lines in fenced_blocks(path) if lang == "text"
              for line in lines if (m := CHECK_LINE.match(line))]
    assert len(quoted) >= 20
    stale = [q for q in quoted if q[1] not in known]
    assert not stale, stale


def test_banners_are_found():
    assert len(list(banners())) >= 5


def test_the_outputs_the_program_decides_are_found():
    """The stage list, two sysctl blocks and two Nginx greps at least."""
    assert len(CASES) >= 5, [c.id for c in CASES]


REFERENCE_PAGE = ROOT / "docs" / "reference-run.md"


def test_the_reference_page_counts_the_checks_of_its_table():
    """docs/reference-run.md's "every one of the N checks passed": N is the table's checks
    column, summed."""
    text = REFERENCE_PAGE.read_text()
    claimed = int(re.search(r"every one of\s+the (\d+) checks passed", text)[1])
    passed = [tuple(map(int, m)) for m in re.findall(r"\|\s*(\d+)/(\d+)\s*\|\s*$", text, re.M)]
    assert len(passed) == len(reference.captured_stages()), passed
    assert claimed == sum(total for _, total in passed) == sum(ok for ok, _ in passed)


def test_the_reference_pages_say_what_the_capture_has_and_what_its_command_runs_now():
    """docs/reference-run.md: the capture's commit, its stage count and whether it has
    stage 9, read from notebooks/reference-run/; what its `make lab STAGES=...` runs now,
    read from benchmarks/stages.py. README.md's stage count is the capture's."""
    text = " ".join(REFERENCE_PAGE.read_text().split())
    captured = reference.captured_stages()
    commit = json.loads((reference.DEST / "run.json").read_text())["git_commit"]
    assert re.search(r"taken at commit ([0-9a-f]{7,})", text)[1] == commit[:7]
    has = re.search(r"the capture has (\d+) stages and (no stage 9|stage 9)", text)
    assert has and int(has[1]) == len(captured), has
    assert (has[2] == "no stage 9") == ("9" not in {s.key for s in captured})
    command = re.search(r"`make lab STAGES=(\S+)`", text)[1]
    now = stages.select(command)
    said = re.search(r"the same command now runs (\d+) stages and (\d+) checks", text)
    assert said and (int(said[1]), int(said[2])) == (
        len(now), sum(len(s.checks) for s in now)), said
    readme = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"committed reference run \([^)]*?(\d+) stages, one run each\)", readme)
    assert found and int(found[1]) == len(captured), found


def test_the_reference_capture_is_quiet_and_whole():
    """Every captured stage ran with others' CPU under 5% of the server's, and has its
    profile's shares and the server's own percentiles."""
    for stage in reference.captured_stages():
        found = json.loads((reference.DEST / stage.dirname / "metrics.json").read_text())
        assert found["foreign_cpu_pct"] < 5, stage.key
        empty = [k for k in found if (k.startswith("cpu_share_") or k.startswith("server_p"))
                 and found[k] is None]
        assert not empty, f"stage {stage.key}: {empty}"


def test_the_reference_table_is_the_captures_own():
    """docs/reference-run.md's table is what the report writes of notebooks/reference-run/
    (`python -c 'from benchmarks.analysis import report, reference;
    print(report.summary_table(reference.DEST))'`): changed by hand, or left behind a new
    capture, it fails here."""
    table = report.summary_table(reference.DEST)
    assert table in REFERENCE_PAGE.read_text(), table


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


def test_lab_11s_stage_lists_are_the_failures_set():
    """README's row for lab 11 and the exercise index's entry list the `failures` set as
    benchmarks/stages.py runs it: every twin, each beside its base stage."""
    wanted = [s.key for s in stages.select("failures")]
    readme = (ROOT / "README.md").read_text()
    row = re.search(r"^\| \[11 [^]]+\]\([^)]+\) \| ([^|]+) \|", readme, re.M)
    index = (ROOT / "exercises" / "README.md").read_text()
    entry = re.search(r"\(the `failures` set: stages ([\w, ]+)\)", index)
    for where, found in (("README.md", row), ("exercises/README.md", entry)):
        assert found, f"{where} no longer lists lab 11's stages"
        assert found[1].strip().split(", ") == wanted, f"{where}: {found[1]}, not {wanted}"


def test_the_readmes_main_line_counts_are_the_registrys():
    """README's `make lab` figure: the main line's stages and its checks, all passed, as
    benchmarks/stages.py gives them."""
    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"\(the main line, (\d+) stages, .*?; (\d+) of (\d+) checks passed\)",
                      text)
    assert found, "README.md no longer says how long `make lab` took, with its checks"
    main = stages.select("main")
    assert int(found[1]) == len(main)
    assert int(found[2]) == int(found[3]) == sum(len(s.checks) for s in main)
