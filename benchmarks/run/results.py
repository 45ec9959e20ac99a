"""The results layout, in one place: every reader and writer of a run uses this.

    results/
      latest -> 20261122-081500          the newest `lab run` (a symlink)
      up/<stage folder>/                 what `lab up` keeps while a stage is up
      up.json                            which stage `lab up` serves, for `lab exec`
      up.lock                            locked by that `lab up` while it runs (one at a time)
      up/<stage folder>/sampler.csv      ... its sampler, until the stage stops
      up/<stage folder>/sockets.json     ... the classes and port ranges the Sockets tab reads
      up/<stage folder>/sockets-tab.png  ... the Sockets tab, as the browser test saw it
      20261122-081500/                   one run
        run.json                         parameters, commit, versions, environments (every
                                         package), kernel, cores, stages
        summary.csv  report.md  plots/   the whole run (benchmarks/analysis/report.py)
        repeats/2/00-builtin/ ...        with --repeats N, repeat k's stage folders (k >= 2;
                                         repeat 1's are the run's own, below)
        floor.json  floor.csv            the floor study's figures and table
                                         (benchmarks/studies/floor.py --into), or with
        floor.log                        `lab run --floor` repeat 1's floor and the study's
        repeats/2/floor.json ...         output; repeat k's in repeats/k/ (lab_repeat: k)
        00-builtin/                      one folder per stage (Stage.dirname)
          locust.json                    Locust's totals at exit (--json-file, prefix `locust`)
          locust.html                    Locust's own report of the measured run (--html)
          locust_stats.csv ...           Locust's --csv files, rewritten once a second
          latency.hlog                   every request's time as an HdrHistogram log (µs, 3
                                         significant digits; benchmarks/latency_log.py)
          sampler.csv                    the sampler's time series
          sysctl.json  verify.json       what the stage ran with and answered
          access.log  app.log            the app's access log (gunicorn); its output (`flask run`
                                         logs each request there)
          socketio-access.log            stage 9: its Socket.IO server's (gunicorn's) access
          app_socketio.log               log and output, beside granian's access.log, app.log
          nginx/access.log               Nginx's access log (stages with a front)
          sessions.json                  the Socket.IO users' sessions: created, completed,
                                         failed, lengths (the master's: every worker's summed)
          count.json                     answered requests the server counted while Locust ran,
                                         and the percentiles of its own request times
          nginx/error.log                Nginx's error log (stages with a front)
          nginx/errors.json              counts of the errors the checks read from it
          metrics.json  checks.json      the numbers and the verdicts
          crash.json  crash.log          the crash twins (8k, 9k): what the client saw of a
                                         killed worker (benchmarks/run/crash.py)
          sockets.json                   the classes and port ranges the Sockets tab reads
          sockets-tab.png                the Sockets tab over the stage's capture (stage_shot.py)
          profile.folded                 py-spy's samples of the (first) app host's server (stage
                                         9: both servers) while measured, as collapsed stacks
                                         (`--format raw`)
          profile.svg  profile.log       their flame graph (benchmarks/profile/flamegraph.py);
                                         py-spy's own output
          threads.json                   the same servers' CPU by thread name over that window
                                         (what py-spy cannot see: benchmarks/profile/threads.py)

`sweep`, `fd_limit`, `book`, `crosscheck` and `lab run --target` make their runs
here too, as `<timestamp>-<suffix>/`, and leave `latest` to `lab run`'s stages.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from benchmarks import latency_log, stages
from benchmarks.stages import Stage

RESULTS = stages.ROOT / "results"
LATEST = "latest"
UP = "up"
UP_STATE = "up.json"
UP_LOCK = "up.lock"  # held by the `lab up` serving from this folder, while it runs

# files of a run
RUN_JSON = "run.json"
SUMMARY_CSV = "summary.csv"
REPORT_MD = "report.md"
PLOTS = "plots"
FLOOR_JSON = "floor.json"  # the floor study's figures (benchmarks/studies/floor.py)
FLOOR_CSV = "floor.csv"  # its table: each request type and the mix, with intervals
INSTRUMENTS_JSON = "instruments.json"  # benchmarks/studies/instruments/: every repeat's figures
INSTRUMENTS_CSV = "instruments.csv"  # its table: each instrument against bare
FLOOR_LOG = "floor.log"  # `lab run --floor`: the study's output, in each repeat's folder

# files of a stage
LOCUST_PREFIX = "locust"  # Locust's --csv prefix: locust_stats.csv, locust_stats_history.csv
LOCUST_STATS = "locust_stats.csv"
LOCUST_JSON = "locust.json"  # --json-file: every request, written as Locust exits
LOCUST_HTML = "locust.html"  # --html: Locust's own report of the measured run
LOCUST_HISTORY = "locust_stats_history.csv"
# every request's time in an HdrHistogram log, beside locust.json (benchmarks/latency_log.py)
LATENCY_HLOG = latency_log.FILE_NAME
SAMPLER_CSV = "sampler.csv"
SYSCTL_JSON = "sysctl.json"
VERIFY_JSON = "verify.json"
USERS_JSON = "users.json"
NGINX_DIR = "nginx"
NGINX_ERROR_LOG = "nginx/error.log"
NGINX_ERRORS = "nginx/errors.json"
NGINX_ACCESS_LOG = "nginx/access.log"
APP_ACCESS_LOG = "access.log"
DELIVERY_JSON = "delivery.json"  # benchmarks/run/delivery.py's probe, stages with two app hosts
CRASH_JSON = "crash.json"  # benchmarks/run/crash.py's probe, the crash twins (8k, 9k)
SPANS_JSON = "spans.json"  # benchmarks/run/spans.py: the span sink's count, stages that trace
APP_LOG = "app.log"
COUNT_JSON = "count.json"
SESSIONS_JSON = "sessions.json"  # the Socket.IO sessions (benchmarks/chat.py, SESSIONS)
SNAPSHOTS = "snapshots"  # snapshots/<host>/ss-tanp.txt ...: each host's own socket table
METRICS_JSON = "metrics.json"
SOCKETS_JSON = "sockets.json"  # the Sockets tab's layout (benchmarks/sockets_tab/stats.py)
# the Sockets tab in a browser (benchmarks/sockets_tab/stage_shot.py)
SOCKETS_SCREENSHOT = "sockets-tab.png"
SOCKETS_SHOT_LOG = "sockets-tab.log"  # the Locust web UI that showed it
LOCUST_UI_LOG = "locust-ui.log"  # `lab up`'s Locust web UI
CHECKS_JSON = "checks.json"
# --metrics (benchmarks/run/prometheus.py): prometheus/ holds its config, the targets'
# health and the queries' answers over the measured window (/api/v1/...), and its graph
PROMETHEUS_DIR = "prometheus"
PROMETHEUS_TARGETS = "prometheus/targets.json"
PROMETHEUS_QUERIES = "prometheus/queries.json"
PROMETHEUS_GRAPH = "prometheus/graph.png"
# py-spy on the app server (benchmarks/profile/): collapsed stacks, one `frame;frame;... count`
# a line, and the flame graph drawn from them
PROFILE_STACKS = "profile.folded"
PROFILE_SVG = "profile.svg"
PROFILE_LOG = "profile.log"
# the same servers' CPU by thread name over the profiled window (benchmarks/profile/threads.py)
THREADS_JSON = "threads.json"


def rel(path: Path) -> str:
    """A path as the user would type it from the repository root (output stays short and
    the same on every machine)."""
    for root in (stages.ROOT, stages.ROOT.resolve()):  # .venv may be a link elsewhere
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            continue
    venv = Path(sys.executable).parent.parent
    try:
        return str(Path(".venv") / Path(path).relative_to(venv))
    except ValueError:
        return str(path)


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def write_json(path: Path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def new_run(base: Path = RESULTS, suffix: str | None = None) -> Path:
    """A new, empty `base/<YYYYmmdd-HHMMSS>[-suffix]` folder.

    Without a suffix it is a `lab run`, and `base/latest` points at it.
    """
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S") + (f"-{suffix}" if suffix else "")
    run_dir, n = base / stamp, 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{n}"
    run_dir.mkdir()
    if suffix is None:
        latest = base / LATEST
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(run_dir.name)
    return run_dir


REPEATS = "repeats"


def repeat_dir(run_dir: Path, repeat: int) -> Path:
    """Where repeat `repeat` (1..N) of `lab run --repeats N` puts its stage folders: the
    run folder itself for the first, so that every reader of one run reads it."""
    return Path(run_dir) if repeat == 1 else Path(run_dir) / REPEATS / str(repeat)


def repeat_dirs(run_dir: Path) -> list[Path]:
    """The run folder, then each repeats/K folder it has, in order."""
    more = Path(run_dir) / REPEATS
    found = sorted((p for p in more.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)) \
        if more.is_dir() else []
    return [Path(run_dir), *found]


def stage_dir(run_dir: Path, stage: Stage) -> Path:
    return Path(run_dir) / stage.dirname


def locust_component(role: str) -> str:
    """The sampler's name for the Locust processes on client host `role`: `locust` on
    `client` (the only one, or the master and a worker), `locust_client2` on `client2`."""
    return "locust" if role == "client" else f"locust_{role}"


def app_access_log(role: str) -> str:
    """The access log of the app server on host `role`: `access.log` (`app`),
    `app2-access.log` (`app2`)."""
    return APP_ACCESS_LOG if role == "app" else f"{role}-{APP_ACCESS_LOG}"


def socketio_access_log(role: str) -> str:
    """The access log of the Socket.IO server on app host `role`, in a stage that has
    one (stage 9): `socketio-access.log` (`app`), `app2-socketio-access.log` (`app2`)."""
    return f"socketio-{APP_ACCESS_LOG}" if role == "app" else f"{role}-socketio-{APP_ACCESS_LOG}"


def count_log(stage: Stage) -> str:
    """The log that counts a stage's answered requests: the entry point's access log."""
    if stage.front:
        return NGINX_ACCESS_LOG
    if stage.server[0] == "gunicorn":
        return APP_ACCESS_LOG
    return APP_LOG  # `flask run` (werkzeug) logs every request to its output


def latency_log(stage: Stage) -> str:
    """The log that times a stage's requests: the entry point's own times (Nginx's
    `$request_time`; gunicorn's `%(L)s`; under `flask run`, which times nothing, the
    app's own lines, app/watchers/access_log.py, in the same file gunicorn would use)."""
    return NGINX_ACCESS_LOG if stage.front else APP_ACCESS_LOG


def up_dir(base: Path, stage: Stage) -> Path:
    return Path(base) / UP / stage.dirname


def up_state(base: Path = RESULTS) -> Path:
    return Path(base) / UP_STATE


def up_lock(base: Path = RESULTS) -> Path:
    return Path(base) / UP_LOCK


def is_run(run_dir: Path) -> bool:
    return (Path(run_dir) / RUN_JSON).exists()


def run_info(run_dir: Path) -> dict:
    return read_json(Path(run_dir) / RUN_JSON)


def measured_stages(run_dir: Path) -> Iterator[tuple[Stage, Path]]:
    """(stage, folder) for every stage of the run that has metrics, in registry order."""
    for stage in stages.STAGES:
        folder = stage_dir(run_dir, stage)
        if (folder / METRICS_JSON).exists():
            yield stage, folder


def present_stages(run_dir: Path) -> Iterator[tuple[Stage, Path]]:
    """(stage, folder) for every stage folder the run has, measured or not."""
    for stage in stages.STAGES:
        folder = stage_dir(run_dir, stage)
        if folder.is_dir():
            yield stage, folder
