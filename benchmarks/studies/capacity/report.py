"""The capacity study's report.md: every step, each stage's verdict over its repeats, the
paired comparison with the reference stage, and the fan-out table.

Intervals are the lab's (benchmarks/analysis/stats.py): a positive quantity's geometric
mean and 95% interval over the repeats; a comparison is the paired test of the ratios
within each repeat (stats.step), at the largest step both stages held in every repeat.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import stats
from benchmarks.studies.capacity import verdict

REPORT = "report.md"
REFERENCE = "9"  # gevent, stage 9's own Socket.IO server: the others are compared with it
STEP_HEADER = ("| stage | repeat | users | connected | delivered | delivery p50 / p99 ms "
               "| KiB PSS a user | real-time CPU % | µs a delivery | load CPU % | verdict |")


CENSUS_HEADER = "| stage | type | objects a user | bytes a user |"
CENSUS_TYPES = 10  # types a stage's table shows, by objects a user
# What the census counts and what it does not (app/watchers/gc_census.py), said before its figures
CENSUS_INTRO = (
    "The real-time server counted its own objects by type (app/watchers/gc_census.py, `--census`) "
    "at rest before any user and at the end of each step, each time after a collection; "
    "a connected user's share is (the step's count - the count at rest) / the users "
    "connected, at the largest step every repeat held (the mean of the repeats). Counted: "
    "every object the collector tracks, frozen ones too, and the strings, bytes, numbers "
    "and other untracked objects they hold, each once; bytes are shallow sizes "
    "(`sys.getsizeof`), and the C stacks greenlets saved are counted apart. Not counted: "
    "the Python frames a greenlet waits in, objects only C code holds, C libraries' "
    "buffers, and the allocator's overhead, all of which PSS includes. A census pauses "
    "the server, and what it allocates may stay in its heap: a run with `--census` is "
    "not a headline run.")


FAN_HEADER = ("| stage | processes | users | µs of the real-time server a delivery "
              "| of each process | the queue listener's share of its samples |")


def separator(header: str) -> str:
    return "|" + "---|" * (header.count("|") - 1)


def step_line(r: dict) -> str:
    said = "held" if not r["broke"] else "broke: " + "; ".join(r["broke"])
    return (f"| {r['stage']} | {r['repeat']} | {r['users']:,} | {r['connected']:,} | "
            f"{r['received']:,} of {r['expected']:,} | {r['delivery_p50_ms']} / "
            f"{r['delivery_p99_ms']} | {r['pss_kib_per_user']} | {r['realtime_cpu_percent']} | "
            f"{r['realtime_us_per_delivery']} | {r['load_cpu_percent_max']} | {said} |")


def by_stage(rows: list[dict]) -> dict[str, dict[int, list[dict]]]:
    """stage -> repeat -> its steps, in order."""
    found: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        found[r["stage"]][r["repeat"]].append(r)
    return found


def held_steps(repeats: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """users -> that step's row in each repeat, for the steps every repeat held."""
    per: dict[int, list[dict]] = defaultdict(list)
    for steps in repeats.values():
        for r in steps:
            if not r["broke"]:
                per[r["users"]].append(r)
    return {u: rs for u, rs in per.items() if len(rs) == len(repeats)}


def shown(iv: dict) -> str:
    if iv["mean"] is None:
        return "n/a"
    if iv["low"] is None:
        return f"{iv['mean']:.1f}"
    return f"{iv['mean']:.1f} [{iv['low']:.1f}, {iv['high']:.1f}]"


def stage_line(stage: str, repeats: dict[int, list[dict]]) -> str:
    """How many repeats held each step, the figures at the largest step every repeat held,
    and what broke first."""
    total, held_in = len(repeats), defaultdict(int)
    for steps in repeats.values():
        for r in steps:
            held_in[r["users"]] += not r["broke"]
    steps = sorted({r["users"] for steps in repeats.values() for r in steps})
    said = f"- **{stage}**: " + ", ".join(
        f"{u:,} users held in {held_in[u]} of {total} repeats" for u in steps)
    common = held_steps(repeats)
    if common:
        top = max(common)
        rs = common[top]
        said += (f"; at {top:,}: {shown(stats.interval(r['pss_kib_per_user'] for r in rs))} "
                 f"KiB PSS a user, "
                 f"{shown(stats.interval(r['realtime_us_per_delivery'] for r in rs))} µs of "
                 f"the real-time server's CPU a delivery, delivery p99 "
                 f"{shown(stats.interval(r['delivery_p99_ms'] for r in rs))} ms")
    broke = [steps[-1] for steps in repeats.values() if steps[-1]["broke"]]
    for r in broke[:1]:
        said += (f"; at {r['users']:,} (repeat {r['repeat']}): {'; '.join(r['broke'])}; "
                 f"{verdict.limited_by(r['limit'])}")
    left = [steps[-1]["left_pss_mib"] for steps in repeats.values()
            if steps[-1].get("left_pss_mib") is not None]
    if left:
        said += (f"; once its users had left, its PSS stayed {', '.join(map(str, left))} MiB "
                 f"above its rest")
    ran = {(r.get("python"), r.get("gc_thresholds")) for steps in repeats.values()
           for r in steps if r.get("python")}
    for python, thresholds in sorted(ran):  # as its server said it (app/watchers/gc_log.py)
        said += f"; its server ran {python}, collector thresholds {thresholds}"
    return said


def ran_steps(repeats: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """users -> that step's row in each repeat, for the steps every repeat ran (held or
    broke: the one that broke is the step that matters)."""
    per: dict[int, list[dict]] = defaultdict(list)
    for steps in repeats.values():
        for r in steps:
            per[r["users"]].append(r)
    return {u: rs for u, rs in per.items() if len(rs) == len(repeats)}


def reference_of(stage: str, present) -> str | None:
    """What `stage` is compared with: the same stage on the repository's Python for one
    from a Python root (`10 py3.14.8`: 10), its twin's base where the run has it (10t:
    10), else stage 9 (REFERENCE); None for the reference itself and the fan-out variants."""
    if stage == REFERENCE or " x" in stage:
        return None
    if " py" in stage:
        own = stage.split(" py")[0]
        return own if own in present else None
    base = stages.BY_KEY[stage].twin_of if stage in stages.BY_KEY else None
    return base if base in present else REFERENCE if REFERENCE in present else None


def paired_steps(found: dict[str, dict[int, list[dict]]]) -> list[tuple[str, dict]]:
    """Each stage against its reference, as (what, stats.step): memory and CPU at the
    largest step both held in every repeat; the delivery p99 at the largest step both ran
    in every repeat (where the reference broke, when it did)."""
    out = []
    for stage, repeats in found.items():
        base = reference_of(stage, found)
        if base is None or len(repeats) != len(found[base]):
            continue
        for steps, names in ((held_steps, (("pss_kib_per_user", "memory a user"),
                                           ("realtime_us_per_delivery", "CPU a delivery"))),
                             (ran_steps, (("delivery_p99_ms", "delivery p99"),))):
            ref, mine = steps(found[base]), steps(repeats)
            both = sorted(set(ref) & set(mine))
            for name, words in names if both else ():
                top = both[-1]
                ratios = [b[name] / a[name] for a, b in zip(ref[top], mine[top], strict=True)
                          if a[name] and b[name]]
                if ratios:
                    out.append((f"{stage} / {base}, {words} at {top:,} users",
                                stats.step(ratios)))
    return out


def paired_lines(found: dict[str, dict[int, list[dict]]]) -> list[str]:
    """The paired steps in words, one family (Holm's method), its size said first."""
    steps = paired_steps(found)
    if not steps:
        return []
    tested = stats.family([step for _, step in steps])
    return [stats.family_line(tested, start=True) + ".", "",
            *(f"- {what}: {stats.verdict(step)}" for (what, _), step in zip(steps, tested,
                                                                           strict=True))]


def fanout_lines(rows: list[dict]) -> list[str]:
    """Per base stage and process count, at the largest step every variant held."""
    bases: dict[str, dict[int, dict]] = defaultdict(dict)
    for stage, repeats in by_stage(rows).items():
        processes = next(iter(repeats.values()))[0]["processes"]
        bases[stage.split(" x")[0]][processes] = held_steps(repeats)
    out = []
    for base, per in bases.items():
        common = set.intersection(*(set(h) for h in per.values())) if len(per) > 1 else set()
        if not common:
            continue
        top = max(common)
        for n, held in sorted(per.items()):
            rs = held[top]
            share = stats.mean(r.get("listener_share") for r in rs)
            out.append(f"| {base} | {n} | {top:,} | "
                       f"{shown(stats.interval(r['realtime_us_per_delivery'] for r in rs))} | "
                       f"{shown(stats.interval(r['realtime_us_per_delivery'] / n for r in rs))}"
                       f" | {'n/a' if share is None else f'{share:.2f}'} |")
    return out


def census_rows(repeats: dict[int, list[dict]]) -> tuple[int, list[dict]] | None:
    """The largest step every repeat held, and its rows, where they have a census."""
    common = held_steps(repeats)
    if not common or "census_types" not in common[max(common)][0]:
        return None
    return max(common), common[max(common)]


def listed_means(rs: list[dict], field: str) -> list[tuple[str, list[float]]]:
    """A census field's [label, figures...] lists, each figure the mean of the repeats
    that list the label among their top ones; by the first figure, largest first."""
    listed: dict[str, list[list[float]]] = defaultdict(list)
    for r in rs:
        for label, *figures in r[field]:
            listed[label].append(figures)
    means = {label: [stats.mean(column) for column in zip(*found, strict=True)]
             for label, found in listed.items()}
    return sorted(means.items(), key=lambda kv: -kv[1][0])


def census_line(stage: str, top: int, rs: list[dict]) -> str:
    """A stage's census at its step `top`, as a sentence."""
    def mean(name: str) -> float:
        return stats.mean(r[name] for r in rs)

    greenlets = ", ".join(f"{n:.1f} `{label}`"
                          for label, (n,) in listed_means(rs, "census_greenlets"))
    return (f"- **{stage}** at {top:,} users: a connected user held "
            f"{mean('census_objects_per_user'):,.0f} objects, "
            f"{mean('census_tracked_per_user'):,.0f} of them tracked by the collector, "
            f"{mean('census_bytes_per_user') / 1024:.1f} KiB by their shallow sizes and "
            f"{mean('census_stack_bytes_per_user') / 1024:.1f} KiB of greenlet stacks, "
            f"against {mean('pss_kib_per_user'):.1f} KiB PSS; its greenlets, by what they "
            f"run: {greenlets or 'none'}; each census paused the server for up to "
            f"{max(r['census_seconds'] for r in rs):.1f} s.")


def census_table(stage: str, rs: list[dict]) -> list[str]:
    """The types a user holds most of, by objects a user."""
    return [f"| {stage} | `{kind}` | {objects:,.1f} | {size:,.0f} |"
            for kind, (objects, size) in listed_means(rs, "census_types")[:CENSUS_TYPES]]


def census_lines(found: dict[str, dict[int, list[dict]]]) -> list[str]:
    """Each stage's census (--census): a sentence, then its types in one table."""
    said, table = [], []
    for stage, repeats in found.items():
        chosen = census_rows(repeats)
        if chosen:
            said.append(census_line(stage, *chosen))
            table += census_table(stage, chosen[1])
    if not said:
        return []
    return [CENSUS_INTRO, "", *said, "", CENSUS_HEADER, separator(CENSUS_HEADER), *table]


def write(run_dir: Path, rows: list[dict], command: str) -> Path:
    found = by_stage(rows)
    lines = [f"# Capacity: `{command}`", "", STEP_HEADER, separator(STEP_HEADER),
             *map(step_line, rows), "", "## Each stage", "",
             *(stage_line(s, reps) for s, reps in found.items())]
    paired = paired_lines(found)
    if paired:
        lines += ["", "## Against the stage each is a step from (paired over repeats)", "",
                  *paired]
    census = census_lines(found)
    if census:
        lines += ["", "## A connected user's objects (the server's census)", "", *census]
    fan = fanout_lines(rows)
    if fan:
        lines += ["", "## Fan-out (the real-time server on N processes)", "", FAN_HEADER,
                  separator(FAN_HEADER), *fan]
    path = run_dir / REPORT
    path.write_text("\n".join(lines) + "\n")
    return path
