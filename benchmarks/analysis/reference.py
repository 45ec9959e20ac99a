"""Copy a small, curated subset of a real lab run into notebooks/reference-run/.

    python -m benchmarks.analysis.reference RUN_DIR       # e.g. results/latest after `make lab`
    python -m benchmarks.analysis.reference RUN_DIR --add # its stages added to the copy
    python -m benchmarks.analysis.reference --recompute   # after a metric was added

The notebooks and docs read `notebooks/reference-run/` when there is no
`results/latest`, so a fresh clone has real numbers to look at. The copy keeps
what the analysis reads and drops the rest:

- run folder: run.json, summary.csv, report.md (regenerated, with plots/*.png)
- per stage:  locust_stats.csv, locust_stats_history.csv (Aggregated rows only),
              sampler.csv, metrics.json, checks.json, sysctl.json, verify.json,
              nginx/errors.json (what the checks count in Nginx's error log),
              count.json (the server's count of answered requests), delivery.json
- not copied: server/Nginx/Locust logs (stage 4's error log alone is tens of MB),
              ss/netstat snapshots, users.json (seeded passwords), Redis data,
              locust_failures.csv and the rest

RUN_DIR itself is only read. notebooks/reference-run/ is replaced as a whole,
or, with `--add`, keeps its other stages: RUN_DIR's stages replace theirs,
`run.json` lists them under `added` (when, which commit, which stages), and
every stage's metrics.json and checks.json are computed again from the
copied files (a metric added since gets its value, None where it does not
apply); `--recompute` does only that.
`report.md`, `summary.csv` and the plots are written again by
benchmarks/analysis/report.py from the copied files, so their links and numbers match
the copy. The command ends with the copy's size (it should stay under SIZE_LIMIT).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import stages
from benchmarks.analysis import metrics, nginx_errors, report
from benchmarks.profile import buckets
from benchmarks.run import results

DEST = stages.ROOT / "notebooks" / "reference-run"
RUN_FILES = (results.RUN_JSON, results.SUMMARY_CSV, results.REPORT_MD)
STAGE_FILES = (results.LOCUST_JSON, results.LOCUST_STATS, results.LOCUST_HISTORY,
               results.SAMPLER_CSV, results.METRICS_JSON, results.CHECKS_JSON,
               results.SYSCTL_JSON, results.VERIFY_JSON, results.NGINX_ERRORS,
               results.COUNT_JSON, results.DELIVERY_JSON, results.SESSIONS_JSON,
               results.PROFILE_STACKS, results.SPANS_JSON)
# The stages the reference capture holds: every set but `failures` (lab 11 shows its
# twins' own outputs), so that the notebook and the README's table cover every stage
# the labs before it teach.
SETS = tuple(name for name in stages.SETS if name != "failures")
# Stages newer than the capture, left out until a quiet run adds them (`--add`): stage 9
# (granian) was measured only on a box shared with other load (others' CPU 40-70%), and
# its twins of the realtime set (lab 16: 10, 10t and 10l too) and of the watched set (lab 17)
# came after it.
NOT_YET = ("9", "9e", "9t", "9a", "10", "10t", "10l", "9p", "9o", "9o10")


def captured_stages() -> list[stages.Stage]:
    """The stages notebooks/reference-run/ should hold, in the order a run takes them."""
    return [s for s in stages.select(",".join(SETS)) if s.key not in NOT_YET]

# bytes; the capture is committed, so it must stay small (17 stages, ~87 kB each, of
# which ~13 kB is the profile cut to its buckets' frames)
SIZE_LIMIT = 1_500_000


def _copy_history(src: Path, dest: Path) -> None:
    """Locust's history, Aggregated rows only (with --csv-full-history it has one per URL)."""
    with open(src, newline="") as f_in, open(dest, "w", newline="") as f_out:
        reader = csv.reader(f_in)
        header = next(reader, None)
        if header is None:
            return
        writer = csv.writer(f_out, lineterminator="\n")
        writer.writerow(header)
        name = header.index("Name") if "Name" in header else None
        writer.writerows(row for row in reader if name is None or row[name] == "Aggregated")


def copy(run_dir: Path, dest: Path = DEST) -> list[Path]:
    """Replace dest with the curated subset of run_dir; the files written, sorted."""
    run_dir = Path(run_dir).resolve()
    if not results.is_run(run_dir):
        raise FileNotFoundError(f"{run_dir} is not a lab run folder (no run.json)")
    dest = Path(dest)
    if dest.resolve() == run_dir:
        raise ValueError("the reference run cannot be copied onto itself")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in RUN_FILES:
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, dest / name)
    info = results.run_info(run_dir)
    for stage, src in results.present_stages(run_dir):
        for name in STAGE_FILES:
            if not (src / name).exists():
                continue
            target = results.stage_dir(dest, stage) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if name == results.LOCUST_HISTORY:
                _copy_history(src / name, target)
            elif name == results.PROFILE_STACKS:  # the buckets' deciding frames only
                buckets.reduce(src / name, target)
            else:
                shutil.copyfile(src / name, target)
        counts = nginx_errors.count_log(src)  # a run older than errors.json has only the log
        if counts is not None and not (src / results.NGINX_ERRORS).exists():
            target = results.stage_dir(dest, stage) / results.NGINX_ERRORS
            target.parent.mkdir(parents=True, exist_ok=True)
            results.write_json(target, counts)
    if any(results.measured_stages(dest)):  # the copy's figures come from its own files
        return recompute(dest)
    if info.get("stages"):
        print("reference: no stage of this run has metrics.json; report.md copied as is")
    return sorted(p for p in dest.rglob("*") if p.is_file())


def add(run_dir: Path, dest: Path = DEST) -> list[Path]:
    """Add run_dir's stages to the reference in dest (see the module docstring)."""
    run_dir = Path(run_dir).resolve()
    if not results.is_run(dest):
        raise FileNotFoundError(f"{dest} holds no reference run to add to")
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "fresh"
        copy(run_dir, fresh)
        new = results.run_info(fresh)
        info = results.run_info(dest)
        keys = list(new.get("stages", {}))
        for stage, _ in results.present_stages(fresh):
            target = results.stage_dir(dest, stage)
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(results.stage_dir(fresh, stage), target)
    info["stages"].update(new["stages"])
    order = [s.key for s in stages.STAGES]
    info["stages"] = dict(sorted(info["stages"].items(), key=lambda kv: order.index(kv[0])))
    info["parameters"]["stages"] = list(info["stages"])
    info.setdefault("added", []).append({"started": new.get("started"),
                                         "git_commit": new.get("git_commit"),
                                         "parameters": new.get("parameters"), "stages": keys})
    results.write_json(dest / results.RUN_JSON, info)
    return recompute(dest)


def recompute(dest: Path = DEST) -> list[Path]:
    """Every stage's metrics.json and checks.json computed again from the copied files,
    and the report written again: a metric added since gets its value (None where the
    copy lacks what it is computed from)."""
    if not results.is_run(dest):
        raise FileNotFoundError(f"{dest} holds no reference run to compute again")
    for stage, folder in results.present_stages(dest):
        if (folder / results.METRICS_JSON).exists():
            result = metrics.compute(folder, stage)
            results.write_json(folder / results.METRICS_JSON, result)
            results.write_json(folder / results.CHECKS_JSON, metrics.evaluate(stage, result))
    report.write(dest)
    return sorted(p for p in dest.rglob("*") if p.is_file())


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.analysis.reference",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, nargs="?",
                   help="the lab run to copy, e.g. results/latest")
    p.add_argument("--add", action="store_true",
                   help="add its stages to the reference instead of replacing it")
    p.add_argument("--recompute", action="store_true",
                   help="no run: compute the reference's metrics, checks and report again "
                        "(after a metric was added)")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.run_dir is None) != args.recompute:
        parser.error("give a run folder (e.g. results/latest), or --recompute alone")
    try:
        files = (recompute() if args.recompute else add(args.run_dir) if args.add
                 else copy(args.run_dir))
    except (FileNotFoundError, ValueError) as e:
        print(f"reference: {e}")
        return 2
    total = size(DEST)
    print(f"reference: {len(files)} files, {total / 1000:.0f} kB in "
          f"{DEST.relative_to(stages.ROOT)}/")
    if total > SIZE_LIMIT:
        print(f"reference: WARNING: over {SIZE_LIMIT / 1e6:g} MB; a shorter run (--duration) "
              "or fewer stages keeps the committed capture small")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
