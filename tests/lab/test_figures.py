"""Figures in prose that quote the committed reference capture are its own.

Each entry: a doc, a pattern with the figure as its group, and the figure as the
capture (notebooks/reference-run/) gives it, formatted as the prose writes it. A
figure changed by hand, or left behind by a new capture, fails here. Figures from
other runs carry their command beside them instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.analysis import reference, stats

ROOT = stages.ROOT


def metric(key: str, name: str):
    found = json.loads((reference.DEST / stages.get(key).dirname / "metrics.json").read_text())
    return found[name]


def across(name: str) -> list[float]:
    return [metric(s.key, name) for s in reference.captured_stages()]


def thousands(n: float) -> str:
    return f"{round(n, -3):,.0f}"


FIGURES = [
    ("docs/reference-run.md", r"other processes took at\s+most ([\d.]+)% of the server's core",
     lambda: f"{max(across('foreign_cpu_pct')):g}"),
    ("docs/reference-run.md", r"Client CPU\s+stays under (\d+)% of Locust's core",
     lambda: str(5 * (int(max(across("client_cpu_p95"))) // 5 + 1))),
    ("docs/reference-run.md", r"In 6p the Socket.IO users fail on purpose \(WS acks/s ([\d.]+)",
     lambda: f"{metric('6p', 'sio_rps'):g}"),
    ("docs/reference-run.md", r"\(WS acks/s [\d.]+:\s+(\d+) acks, too few for a p95",
     lambda: f"{metric('6p', 'sio_requests')}"),
    ("docs/reference-run.md", r"too few for a p95, which read (\d+) s, the time-out",
     lambda: f"{metric('6p', 'sio_p95_ms') / 1000:g}"),
    ("docs/stages.md", r"([\d.]+) in stage 4 and\s+[\d.]+ in stage 5 in the reference capture",
     lambda: f"{metric('4', 'upstream_reused_share'):.1f}"),
    ("docs/stages.md", r"in stage 4 and\s+([\d.]+) in stage 5 in the reference capture",
     lambda: f"{metric('5', 'upstream_reused_share'):g}"),
    ("exercises/11-when-it-breaks.md", r"one TIME_WAIT on the app host per request, about\s+"
     r"([\d,]+) at the peak", lambda: thousands(metric("0", "tw_redis_peak"))),
    ("exercises/12-profile-then-fix.md", r"the Redis connect bucket was ([\d.]+) of the app's\s+"
     r"samples in stage 1", lambda: f"{metric('1', 'cpu_share_redis_connect'):.2f}"),
    ("exercises/12-profile-then-fix.md", r"samples in stage 1; in stage 2 it was ([\d.]+)",
     lambda: f"{metric('2', 'cpu_share_redis_connect'):.3f}"),
    ("exercises/12-profile-then-fix.md",
     r"the reference run's stage 5 the buckets were: ([\s\S]+?)\.\s",
     lambda: share_list("5", [("Redis commands", "redis_commands"),
                              ("the HTTP\nserver's loop", "http_server"),
                              ("Flask's routing and hooks", "flask"), ("JSON", "json"),
                              ("werkzeug's\nrequest objects", "request_objects"),
                              ("the token check", "token"), ("logging", "logging"),
                              ("Socket.IO", "socketio")])),
    ("exercises/12-profile-then-fix.md", r"HTTP server's own loop was (\d\.\d+) of stage 7's",
     lambda: f"{metric('7', 'cpu_share_http_server'):.2f}"),
    ("exercises/12-profile-then-fix.md", r"up\s+from stage 5's (\d\.\d+)",
     lambda: f"{metric('5', 'cpu_share_http_server'):.2f}"),
    ("exercises/15-how-close-to-the-floor.md", r"its app server used ([\d.]+) ms of CPU",
     lambda: f"{metric('8', 'app_cpu_ms_per_request'):g}"),
    ("exercises/15-how-close-to-the-floor.md", r"Nginx, Redis\) ([\d.]+) ms\. Is that",
     lambda: f"{metric('8', 'server_cpu_ms_per_request'):g}"),
    ("exercises/15-how-close-to-the-floor.md", r"\(`cpu_share_http_server` (\d\.\d+)\)",
     lambda: f"{metric('8', 'cpu_share_http_server'):g}"),
    ("exercises/15-how-close-to-the-floor.md", r"\(`cpu_share_logging` (\d\.\d+),",
     lambda: f"{metric('8', 'cpu_share_logging'):g}"),
    ("exercises/15-how-close-to-the-floor.md", r"`cpu_share_request_objects`\s+(\d\.\d+),",
     lambda: f"{metric('8', 'cpu_share_request_objects'):g}"),
    ("exercises/15-how-close-to-the-floor.md", r"\s(\d+) of 1,547 samples\)",
     lambda: str(round(metric('8', 'cpu_share_request_objects')
                       * metric('8', 'profile_samples')))),
]


def share_list(key: str, named: list[tuple[str, str]]) -> str:
    """`Redis commands 0.43, the HTTP server's loop 0.30, ...` as the prose words it."""
    return ", ".join(f"{words} {metric(key, 'cpu_share_' + bucket):.2f}"
                     for words, bucket in named)


@pytest.mark.parametrize("path,pattern,figure", FIGURES,
                         ids=[f"{path}-{n}" for n, (path, _, _) in enumerate(FIGURES)])
def test_a_quoted_reference_figure_is_the_captures(path, pattern, figure):
    text = (ROOT / path).read_text()
    found = re.search(pattern, text)
    assert found, f"{path} no longer says {pattern!r}"
    assert found[1] == figure(), f"{path}: {found[0]!r}, the capture says {figure()}"



def test_lab_14s_table_is_the_omission_captures_own():
    """Lab 14 quotes the study's table whole: every row of it is a row of the capture's
    report (notebooks/omission-run/, the notebook's fallback), and none is missing."""
    capture = stages.ROOT / "notebooks" / "omission-run" / "report.md"
    lab = stages.ROOT / "exercises" / "14-how-not-to-measure-latency.md"
    rows = [line for line in capture.read_text().splitlines() if line.startswith("| 2 |")
            or line.startswith("| 5 |")]
    quoted = [line for line in lab.read_text().splitlines() if line in rows]
    assert len(rows) == 20 and quoted == rows, set(rows) - set(quoted)


LAB_15 = ROOT / "exercises" / "15-how-close-to-the-floor.md"
FLOOR_RUNS = ROOT / "docs" / "floor-runs.md"  # the runs lab 15 quotes, whole


def test_lab_15s_verdicts_say_what_the_interval_allows():
    """Every "not significant" in lab 15 and on the page of its runs goes on to say what
    its interval still allows (stats.verdict's form), and the 8 -> 9 verdicts are the
    paired test of the page's own per-repeat figures: req/s, and server CPU per request
    (the lab quotes both)."""
    lab = " ".join(LAB_15.read_text().split())
    text = " ".join(FLOOR_RUNS.read_text().split())
    said = [(page, m) for page in (lab, text) for m in re.finditer(r"not significant", page)]
    assert len(said) >= 5
    for page, m in said:
        after = page[m.end():m.end() + 70]
        assert re.match(r": between [\d.]+x and [\d.]+x, " + stats.CANNOT_TELL, after), after
    for page in (lab, text):
        assert "not reached" not in page and "did not move" not in page
    rows = {m[1]: m for m in re.finditer(r"\| (8|9) \| ([\d., ]+) \| ([\d., ]+) \|", text)}
    each = {k: [[float(x.replace(",", "")) for x in re.split(r", (?=\d)", m[i])]
                for i in (2, 3)] for k, m in rows.items()}
    rps = [b / a for a, b in zip(each["8"][0], each["9"][0], strict=True)]
    cpu = [b / a for a, b in zip(each["8"][1], each["9"][1], strict=True)]
    for page in (text, lab):
        assert f"8 -> 9: {stats.verdict(stats.step(rps))}" in page
        assert stats.verdict(stats.step(cpu)) in page


CAPACITY = ROOT / "notebooks" / "capacity-run"
LAB_16 = ROOT / "exercises" / "16-how-many-users.md"
CAPACITY_RUNS = ROOT / "docs" / "capacity-runs.md"


@pytest.mark.parametrize("part, page, table", [
    ("stage-10", LAB_16, True),  # the lab's one main table: 9 against 10, three repeats
    # the steps two settings are (10t, 10l against 10, three repeats): its stage lines
    # and paired steps, its table left in the capture it links
    ("steps", LAB_16, False),
    # the earlier one-repeat runs, on a page of their own
    ("main", CAPACITY_RUNS, True), ("first", CAPACITY_RUNS, True),
    ("fanout", CAPACITY_RUNS, True), ("goal", CAPACITY_RUNS, True),
    ("deflate", CAPACITY_RUNS, True),
    ("stage-10-first", CAPACITY_RUNS, True),  # the main run's command, once before
    ("python-3.14", CAPACITY_RUNS, True),  # stage 10's server on 3.14 beside 3.11
    ("census", CAPACITY_RUNS, True),  # a connected user's objects by type (--census)
])
def test_lab_16s_tables_are_the_capacity_captures_own(part, page, table):
    """Each capture's report (notebooks/capacity-run/PART/report.md, written by the study)
    is quoted whole where it is shown: every stage line and paired step, as the study
    wrote them, and where its table is shown, every row, one for every step the capture
    ran; the lab links every capture."""
    report = (CAPACITY / part / "report.md").read_text().splitlines()
    rows = [line for line in report if line.startswith(("| 9", "| 10"))]
    said = json.loads((CAPACITY / part / "capacity.json").read_text())
    assert len(rows) >= len(said["rows"])
    quoted = [line for line in report if line.startswith("- ")] + (rows if table else [])
    shown = page.read_text().splitlines()
    assert quoted and all(line in shown for line in quoted), set(quoted) - set(shown)
    assert f"notebooks/capacity-run/{part}/report.md" in LAB_16.read_text()


WATCHING = ROOT / "notebooks" / "watching-run"
LAB_17 = ROOT / "exercises" / "17-what-watching-costs.md"


# (capture, the report's part whose tables lab 17 quotes whole: from, to)
@pytest.mark.parametrize("part, start, end", [
    ("growth", "## The scrape against", None),
    ("instruments", "# ", "by request type"),  # the split by type stays in the capture
    ("multiprocess", "# ", "Each repeat:"),  # and each repeat's rows
])
def test_lab_17s_tables_are_the_captures_own(part, start, end):
    """Lab 17 quotes these tables of its captures whole (notebooks/watching-run/PART/
    report.md, written by its study): every row, as the study wrote it."""
    text = (WATCHING / part / "report.md").read_text()
    text = text[text.index(start):text.index(end) if end else len(text)]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    lab = LAB_17.read_text().splitlines()
    assert lines and all(line in lab for line in lines), set(lines) - set(lab)


def holm_of(report: Path, lines_from: str) -> list[tuple[str, float, float]]:
    """(step line, its own p, its Holm-adjusted p over every step of the report), for a
    capture written before the reports adjusted their steps (stats.family)."""
    text = report.read_text()
    steps = [line for line in text[text.index(lines_from):].splitlines()
             if line.startswith("- ") and re.search(r"p (=|<) [\d.]+", line)]
    ps = [float(m[1]) if (m := re.search(r"p = ([\d.]+)", line)) else 0.0005 for line in steps]
    return list(zip(steps, ps, stats.holm(ps), strict=True))


def test_lab_17s_recycling_figures_are_the_captures_own():
    """The recycling capture keeps every run's row (one per run of recycling.json) and its
    6 steps; lab 17 quotes the steps' own p and Holm's adjustment over the 6."""
    capture = WATCHING / "recycling" / "report.md"
    said = json.loads((WATCHING / "recycling" / "recycling.json").read_text())["rows"]
    runs = [line for line in capture.read_text().splitlines()
            if re.match(r"\| [^|]+ \| \d+ \|", line)]
    assert len(runs) == len(said)
    steps = holm_of(capture, "## Steps")
    assert len(steps) == 6
    lab = " ".join(LAB_17.read_text().split())
    for line, p, adjusted in steps:
        if "1 workers, max_requests 300, jitter 0 / no recycling" in line:
            assert f"p = {p:.3f} alone, {adjusted:.3f} adjusted for the 6 steps" in lab
        if "4 workers, max_requests 300, jitter 0 / no recycling" in line:
            assert f"p = {p:.3f}, {adjusted:.3f} adjusted" in lab


def test_lab_17s_queries_are_the_ones_the_lab_draws():
    """The two queries lab 17 has its reader type are the graph's (benchmarks/run/prometheus.py)."""
    from benchmarks.run import prometheus

    lab = LAB_17.read_text()
    for query in (prometheus.RATE, prometheus.P99):
        assert f"\n{query.format(w='5s')}\n" in lab, query


def test_lab_17s_served_steps_and_spans_are_the_captures_own():
    """Lab 17's served section (notebooks/watching-run/served/, a lab run of 9, 9p, 9o,
    9o10 with 3 repeats): the Repeats table, the count of its steps and the smallest
    adjusted p (Holm's over them all), and the traced runs' spans, as the run's report.md
    and spans.json files give them."""
    served = WATCHING / "served"
    report = (served / "report.md").read_text().splitlines()
    table = [line for line in report[report.index("## Repeats"):] if line.startswith("| 09")]
    lab = LAB_17.read_text()
    assert len(table) == 4 and all(line in lab.splitlines() for line in table), table
    steps = holm_of(served / "report.md", "## Repeats")
    smallest = min(steps, key=lambda s: s[1])
    said = " ".join(lab.split())
    assert f"It tested {len(steps)} steps and none holds once they are counted" in said
    assert all(adjusted >= 0.05 for *_, adjusted in steps)
    assert f"at p = {smallest[1]:.3f}, at {smallest[2]:.3f}" in said
    requests = []
    for k in (1, 2, 3):
        folder = served / "09o-with-traces" if k == 1 else \
            served / "repeats" / str(k) / "09o-with-traces"
        spans = json.loads((folder / "spans.json").read_text())
        assert spans["spans_lost"] == 0 and spans["spans_server"] == spans["spans_requests"]
        requests.append(spans["spans_requests"])
    assert f"({min(requests):,}-{max(requests):,} a repeat)" in said


def test_lab_17_fits_its_slot():
    """A lab is a slot of a day (issue 58): at most 3,000 words, its reference tables in
    the captures it links."""
    assert len(LAB_17.read_text().split()) <= 3000


def test_lab_16s_prose_figures_are_the_main_captures():
    """The figures lab 16's prose gives beside its main table, read from its capture's rows
    (notebooks/capacity-run/stage-10/capacity.json): stage 9's pauses where it held and
    where it broke, stage 10's at 10,000 users and its server roles' share of their core."""
    rows = json.loads((CAPACITY / "stage-10" / "capacity.json").read_text())["rows"]

    def span(key, stage, users, fmt="{:.0f}"):
        found = [r[key] for r in rows if r["stage"] == stage and r["users"] == users]
        return f"{fmt.format(min(found))} to {fmt.format(max(found))}"

    lab = " ".join(LAB_16.read_text().split())
    assert f"logged {span('gc_pause_max_ms', '9', 5000)} ms" in lab
    assert f"already paused {span('gc_pause_max_ms', '9', 2500)} ms" in lab
    assert f"longest pause there {span('gc_pause_max_ms', '10', 10000)} ms" in lab
    assert f"at {span('server_cpu_percent_of_set', '10', 10000)}% of their one core" in lab


def test_lab_16s_python_314_ratio_is_its_captures():
    """The memory a user on 3.14 against 3.11 that lab 16 quotes, as the capture's own
    paired step (notebooks/capacity-run/python-3.14/report.md) gives it, held in every
    repeat."""
    report = (CAPACITY / "python-3.14" / "report.md").read_text()
    ratio = re.search(r"/ 10, memory a user at 10,000 users: (\S+x) ", report)[1]
    [rooted] = [line for line in report.splitlines() if line.startswith("- **10 py3.14")]
    assert "10,000 users held in 3 of 3 repeats" in rooted
    lab = " ".join(LAB_16.read_text().split())
    assert f"held 10,000 users in 3 of 3 repeats, at {ratio} the memory a user of 3.11" in lab


def test_lab_16s_census_figures_are_its_captures():
    """Stage 10's user as lab 16 gives it: the census capture's own line
    (notebooks/capacity-run/census/report.md)."""
    report = (CAPACITY / "census" / "report.md").read_text()
    [line] = [x for x in report.splitlines() if x.startswith("- **10** at 2,000 users")]
    found = re.search(r"held (\d+) objects, .* ([\d.]+) KiB by their shallow sizes and "
                      r"([\d.]+) KiB of greenlet stacks, against ([\d.]+) KiB PSS", line)
    objects, shallow, stacks, pss = found.groups()
    lab = " ".join(LAB_16.read_text().split())
    assert (f"of stage 10's {pss} KiB PSS a user, {objects} objects of {shallow} KiB by their "
            f"own sizes and one greenlet's saved stack, {stacks} KiB") in lab
