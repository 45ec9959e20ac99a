"""The metrics role (`lab run --metrics`, `lab up STAGE --metrics`): a real Prometheus on a
host of its own (`metrics`, stages.HOSTS), and Debian's exporters beside the roles they
read, started and stopped by the lab with the stage's servers (benchmarks/run/stack.py):

  prometheus-redis-exporter   on the redis host, reading Redis (INFO) on its address
  prometheus-nginx-exporter   on the proxy host, reading Nginx's stub_status, the
                              `/nginx_status` location of the stage's conf.d file, which
                              answers the proxy host alone (and logs nothing: a scrape is
                              not a request of the load)
  prometheus                  on the metrics host, on the client's CPUs (not the measured
                              servers' core), scraping each app host's HTTP server
                              /metrics (app/watchers/metrics.py: the app runs with FLASK_METRICS=1
                              and a PROMETHEUS_MULTIPROC_DIR of its own per server) and
                              the two exporters, every SCRAPE_INTERVAL_S

Its data (the TSDB) goes to a temporary folder, deleted when it stops: a stage's
series are what the run folder keeps of it, as answers (`record`: the targets' health,
the queries' JSON) and a picture of its graph, in its prometheus/ folder (the names:
benchmarks/run/results.py). A run's folder never holds a database.

REQUIREMENTS: Debian's `prometheus`, `prometheus-nginx-exporter`,
`prometheus-redis-exporter` (Makefile METRICS_TOOLS; `make setup` installs them).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks import stages
from benchmarks.run import results
from benchmarks.sandbox import hosts, port_forward, procs, sandbox
from benchmarks.sockets_tab import headless

# Every second: a stage is measured for seconds (the tests' 3 s, 30 s by default), and
# Prometheus's default minute would give it one point or none; 1 s is the sampler's
# pace too, so the graph and sampler.csv line up. Cheap at this size: four targets.
SCRAPE_INTERVAL_S = 1
# The binaries, each named as the Debian package that has it
BINARIES = ("prometheus", "prometheus-nginx-exporter", "prometheus-redis-exporter")
INSTALL = ("make setup installs them, or as root: apt-get install --no-install-recommends "
           + " ".join(BINARIES))
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # app/watchers/metrics.py's (prometheus_client's) name
# The app's request rate and its p99, from its counter and its histogram
REQUESTS = "chat_http_requests_total"
RATE = "sum(rate(chat_http_requests_total[{w}]))"
P99 = ("histogram_quantile(0.99, sum by (le) "
       "(rate(chat_http_request_duration_seconds_bucket[{w}])))")


def missing() -> list[str]:
    """The metrics role's binaries not installed here."""
    return [name for name in BINARIES
            if not (shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin"))]


def missing_line() -> str | None:
    """None when every binary is here, else what to install, for an error before the
    stage starts anything."""
    gone = missing()
    return f"--metrics needs {', '.join(gone)}, not installed: {INSTALL}" if gone else None


def targets(stage: stages.Stage, box) -> dict[str, list[str]]:
    """job -> its targets (address:port): each app host's HTTP server, Nginx's exporter
    in a stage with a front, Redis's exporter."""
    found = {"app": [f"{box.address(r)}:{box.port(r)}" for r in stage.app_roles]}
    if stage.front:
        found["nginx"] = [f"{box.address('proxy')}:{box.port('nginx_exporter')}"]
    found["redis"] = [f"{box.address('redis')}:{box.port('redis_exporter')}"]
    return found


def config(stage: stages.Stage, box) -> str:
    """prometheus.yml: every target every SCRAPE_INTERVAL_S, a scrape given as long."""
    lines = ["# written by the lab (benchmarks/run/prometheus.py) for one stage",
             "global:", f"  scrape_interval: {SCRAPE_INTERVAL_S}s",
             f"  scrape_timeout: {SCRAPE_INTERVAL_S}s", "scrape_configs:"]
    for job, addresses in targets(stage, box).items():
        lines += [f"  - job_name: {job}", "    static_configs:",
                  f"      - targets: [{', '.join(json.dumps(a) for a in addresses)}]"]
    return "\n".join(lines) + "\n"


def commands(stage: stages.Stage, box, conf: Path, data: Path) -> list[tuple[str, str, list,
                                                                             str]]:
    """(process name, host role, command, port name) of each, in the order started: the
    exporters first, so that Prometheus's first scrape finds them."""
    exe = {name: procs.require_binary(name, INSTALL) for name in BINARIES}
    redis = f"redis://{box.address('redis')}:{box.port('redis')}"
    # --flag=value: the exporters of Debian 12 parse flags with Go's flag package, which
    # takes one dash or two; Debian 13's nginx exporter (1.x) with kingpin, two only
    found = [("redis_exporter", "redis", [
        exe["prometheus-redis-exporter"], f"--redis.addr={redis}",
        f"--web.listen-address={box.address('redis')}:{box.port('redis_exporter')}"],
        "redis_exporter")]
    if stage.front:
        status = f"http://{box.address('proxy')}:{box.port('proxy')}/nginx_status"
        found.append(("nginx_exporter", "proxy", [
            exe["prometheus-nginx-exporter"], f"--nginx.scrape-uri={status}",
            f"--web.listen-address={box.address('proxy')}:{box.port('nginx_exporter')}"],
            "nginx_exporter"))
    where = f"{box.address(stages.METRICS_ROLE)}:{box.port(stages.METRICS_ROLE)}"
    found.append(("prometheus", stages.METRICS_ROLE, [
        exe["prometheus"], f"--config.file={conf}", f"--storage.tsdb.path={data}",
        f"--web.listen-address={where}", "--log.level=warn"], stages.METRICS_ROLE))
    return found


def data_prefix(pid: int | None = None) -> str:
    """The temporary folder's name begins so: the lab's pid in it, so that what a lab
    killed with -9 left is told from another lab's."""
    return f"ftl-{pid or os.getpid()}-prometheus-"


def remove_stale() -> list[Path]:
    """Delete the temporary folders of labs that are gone (killed with -9, which
    no `close` follows): `lab clean`. What was deleted."""
    gone = []
    for folder in Path(tempfile.gettempdir()).glob("ftl-*-prometheus-*"):
        owner = folder.name.split("-")[1]
        if owner.isdigit() and not hosts.pid_alive(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


class Prometheus:
    """The role's processes, started through the stack (its `_start`: each on its host,
    waited for, its log beside the servers'), and a temporary folder for its database
    and the app servers' multiprocess files (1 MB sparse files, a process each), deleted
    on `close`."""

    def __init__(self, stack):
        self.stack = stack
        self.root: Path | None = None

    def folder(self, name: str) -> Path:
        """A folder of the temporary one, made on first use."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix=data_prefix()))
        (self.root / name).mkdir(exist_ok=True)
        return self.root / name

    def app_env(self, role: str, server: str) -> dict[str, str]:
        """What an app server runs with: the app's instruments on, and a folder for its
        processes' values (app/watchers/metrics.py), one per server, empty when it starts (the
        stage's own; `flask seed-users`, given the same, serves nothing and writes none)."""
        return {"FLASK_METRICS": "1", MULTIPROC_ENV: str(self.folder(f"{role}-{server}"))}

    def start(self) -> None:
        box, stage = self.stack.box, self.stack.stage
        folder = self.stack.dir / results.PROMETHEUS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "prometheus.yml"
        conf.write_text(config(stage, box))
        for name, role, cmd, port in commands(stage, box, conf, self.folder("tsdb")):
            self.stack._start(name, role, cmd, port=box.port(port), watcher=True)

    def wait_until_scraped(self, timeout: float = 60) -> None:
        """Until Prometheus has scraped every target once and each answered: its scrape
        manager starts seconds after its port opens (it waits for its first target
        update), and a window that began before would find no value of the app's
        counter at its start. ServiceError (a stage that could not run), with the
        targets' errors, if not in time."""
        deadline, up = time.monotonic() + timeout, {}
        with forwarded(self.stack.box) as base:
            while time.monotonic() < deadline:
                found = api(base, "/api/v1/targets")["data"]["activeTargets"]
                up = {f"{t['labels']['job']}/{t['labels']['instance']}":
                      t["lastError"] or t["health"] for t in found}
                if found and set(up.values()) == {"up"}:
                    return
                time.sleep(0.2)
        raise procs.ServiceError(f"Prometheus did not scrape every target within {timeout:g} s: "
                          f"{up}; see {self.stack.dir / 'prometheus.log'}")

    def close(self) -> None:
        """After its processes stopped: the database and the app's files go."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


def api(base: str, path: str, **params) -> dict:
    """GET Prometheus's HTTP API (`/api/v1/query`), its JSON answer."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def settle() -> None:
    """Two scrapes' time: what the app counted so far is then in Prometheus."""
    time.sleep(2 * SCRAPE_INTERVAL_S + 0.2)


def queries(start: float, end: float) -> dict[str, tuple[str, float]]:
    """name -> (PromQL, the time it is asked at) for a window from `start` to `end`
    (Unix seconds): the app's counter at both ends, its rate and p99 over the window,
    Nginx's and Redis's rates as their exporters read them."""
    w = f"{max(2, math.ceil(end - start))}s"
    # the counter's last value within a minute: a scrape that failed (a busy server core
    # past the 1 s timeout) marks a series stale for an instant query, not for this
    counter = f"sum(last_over_time({REQUESTS}[1m]))"
    return {"app_requests_at_start": (counter, start),
            "app_requests_at_end": (counter, end),
            "app_request_rate": (RATE.format(w=w), end),
            "app_p99_seconds": (P99.format(w=w), end),
            "nginx_request_rate": (f"sum(rate(nginx_http_requests_total[{w}]))", end),
            "redis_command_rate": (f"sum(rate(redis_commands_processed_total[{w}]))", end),
            # 1 for a target every scrape of the window reached, else 0
            "targets_up_throughout": (f"min_over_time(up[{w}])", end)}


def value(answer: dict) -> float | None:
    """An instant query's one value (a sum's), or None when it has none."""
    result = answer.get("data", {}).get("result") or []
    return float(result[0]["value"][1]) if len(result) == 1 else None


def record(base: str, stage_dir: Path, start: float, end: float, settled: float) -> dict:
    """The targets' health and each query's answer, into the stage's folder
    (results.PROMETHEUS_TARGETS, _QUERIES): rates over the load's window (`start` to
    `end`), the app's counter at `start` and at `settled`, when its last requests had
    been scraped; what the queries' file holds."""
    (stage_dir / results.PROMETHEUS_DIR).mkdir(parents=True, exist_ok=True)
    (stage_dir / results.PROMETHEUS_TARGETS).write_text(
        json.dumps(api(base, "/api/v1/targets"), indent=1))
    asked = {}
    for name, (expr, at) in queries(start, end).items():
        at = settled if name == "app_requests_at_end" else at
        answer = api(base, "/api/v1/query", query=expr, time=f"{at:.3f}")
        asked[name] = {"query": expr, "time": at, "value": value(answer), "answer": answer}
    first, last = (asked[f"app_requests_at_{e}"]["value"] for e in ("start", "end"))
    out = {"window": {"start": start, "end": end, "seconds": round(end - start, 3)},
           "scrape_interval_s": SCRAPE_INTERVAL_S,
           "app_requests_in_window": None if None in (first, last) else last - first,
           "queries": asked}
    (stage_dir / results.PROMETHEUS_QUERIES).write_text(json.dumps(out, indent=1))
    return out


def graph_url(base: str, start: float) -> str:
    """Prometheus's graph page with two panels, the app's request rate and its p99, from a
    little before `start` to now. Its end is left at now: the page takes an end to the
    minute only. The classic UI's page, /classic/graph: Debian's packages carry no React
    UI, and Debian 13's (2.53) answers /graph with a page that says so; both serve the
    classic one there."""
    span = f"{math.ceil(time.time() - start) + 5}s"
    params = {}
    for i, expr in enumerate((RATE.format(w="5s"), P99.format(w="5s"))):
        params.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": span,
                       f"g{i}.stacked": "0"})
    return f"{base}/classic/graph?{urllib.parse.urlencode(params)}"


def health(targets_json: dict) -> dict[str, str]:
    """job/instance -> its health (`up`, `down`, `unknown`), from /api/v1/targets."""
    return {f"{t['labels']['job']}/{t['labels']['instance']}": t["health"]
            for t in targets_json["data"]["activeTargets"]}


@contextmanager
def forwarded(box, listener=None) -> Iterator[str]:
    """Prometheus's UI and API forwarded into its host as Locust's UI is
    (benchmarks/sandbox/port_forward.py), from `listener` (`lab up`'s, claimed before the
    stage started) or a free port of the machine's 127.0.0.1; its URL on this machine."""
    listener = listener or port_forward.listen(0)
    address, port = listener.getsockname()[:2]
    where = (box.address(stages.METRICS_ROLE), box.port(stages.METRICS_ROLE))
    forward = port_forward.Forward(listener, box.namespace(stages.METRICS_ROLE), where).start()
    try:
        yield f"http://{'127.0.0.1' if address == '0.0.0.0' else address}:{port}"
    finally:
        with sandbox.uninterrupted():  # a second Ctrl-C must not cut the stop short
            forward.stop()


@contextmanager
def window(stack, say=print) -> Iterator[None]:
    """Around the measured load, with --metrics (nothing otherwise): two scrapes' wait
    either side, so Prometheus holds the app's counter as the load starts and as it ends;
    then `record` into the stage's prometheus/, and a picture of the graph (graph.png:
    part of what --metrics keeps, so `--no-screenshots`, the Sockets tab's, leaves it)."""
    if stack.prometheus is None:
        yield
        return
    stack.prometheus.wait_until_scraped()  # (meanwhile the stage was seeded and warmed up)
    settle()
    start = time.time()
    yield
    end = time.time()
    settle()
    with forwarded(stack.box) as base:
        out = record(base, stack.dir, start, end, time.time() - 0.1)
        up = health(json.loads((stack.dir / results.PROMETHEUS_TARGETS).read_text()))
        rate, p99 = (out["queries"][n]["value"] for n in ("app_request_rate", "app_p99_seconds"))
        counted = out["app_requests_in_window"]
        say(f"  prometheus: targets up {sum(h == 'up' for h in up.values())}/{len(up)}; the app "
            f"counted {'?' if counted is None else f'{counted:.0f}'} requests, "
            f"{rate or 0:.1f}/s, p99 {1000 * (p99 or 0):.1f} ms "
            f"({results.rel(stack.dir / results.PROMETHEUS_QUERIES)})")
        shoot(base, stack.dir / results.PROMETHEUS_GRAPH, start, say)


def shoot(base: str, out: Path, start: float, say=print) -> None:
    """graph.png of Prometheus's graph page (headless Chromium, as the Sockets tab's);
    a browser missing or failing is said, never fails the stage."""
    try:
        with headless.chromium() as driver:
            driver.set_window_size(1400, 1800)  # both panels in one picture
            driver.get(graph_url(base, start))
            headless.wait_for_graphs(driver, 2)
            driver.save_screenshot(str(out))
        say(f"  screenshot: {results.rel(out)}")
    except headless.BrowserMissing as e:
        say(f"  no screenshot of Prometheus's graph: {e}")
    except Exception as e:  # the browser's own errors, a page that did not draw
        first = (str(e).strip().splitlines() or [""])[0]
        say(f"  WARNING: no screenshot of Prometheus's graph: {type(e).__name__}: {first}")
