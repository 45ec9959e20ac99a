"""The floor: the app's own CPU per request, with no server at all.

    python -m benchmarks.studies.floor [--repeats 3] [--seconds 2] [--into RUN_DIR]
                                       [--redis-cpu server|apart]
    python -m benchmarks.lab run --stages 8,9 --repeats 3 --floor   # a floor per repeat

Stage 8's app (its code and settings, benchmarks/stages.py TODAY, the Redis pool)
is built in this process and called as a WSGI callable: a prepared environ per
request, no socket, no HTTP parsing, no server. Redis is real: a redis-server
started here on a free loopback port. The app is pinned to the lab's server CPU, and
Redis with it, as every stage puts Redis on the server roles' core (`--redis-cpu
server`, the default); `--redis-cpu apart` pins Redis to the lab's client CPUs
instead, the floor without the cost of sharing a core. The report says which. The requests are the
chat mix's (benchmarks/chat_mix.py: ChatUser's tasks and weights): for each
request type in turn, warmed up first, then a timed loop of --seconds whose
requests each must answer the status the scenario expects (any other is an error,
not a figure). CPU per request = this process's CPU time (every thread of it:
the app and its Socket.IO queue listener) over the loop / the requests; Redis's
own, from its process, the same way. The mix weights the types as the scenario
does. Each repeat measures every type; means and 95% intervals over the repeats
(benchmarks/analysis/stats.py).

Writes results/<timestamp>-floor/ (`floor.json`: each repeat's figures and the
settings; `floor.csv`: the table; `report.md`), or with --into RUN_DIR the first
two into a lab run's folder and rebuilds its report.md, which then gives each
stage's server CPU per request as a multiple of the floor
(benchmarks/analysis/floor.py). `lab run --floor` runs the study after each repeat's
stages (`after_repeat`: one pass of --floor-seconds per type, into that repeat's
folder, `--lab-repeat K`), so that each stage's multiple is a ratio within each
repeat, judged by the paired test as a step between stages is.

Requirements: redis-server and taskset (util-linux), the venv. No root.
Overhead: one core for 6 types x (a warm-up of 0.5 s + --seconds x --repeats), and a
few seconds to start: about 45 s with the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from benchmarks import stages
from benchmarks.analysis import floor
from benchmarks.chat_mix import HISTORY_LIMIT, WEIGHTS
from benchmarks.run import cli, environment, results
from benchmarks.run.cli import StageFailed, say
from benchmarks.run.options import FLOOR_DEFAULT_SECONDS, FLOOR_SECONDS, OptionsError
from benchmarks.sandbox import hosts, procs, sandbox

STAGE = "8"  # whose app code and settings the floor serves
# Stage 8 states gevent for Socket.IO; no gevent worker runs here, so the app would
# serve threading and log that they differ. The HTTP routes never use the mode.
ASYNC_MODE = {"FLASK_SOCKETIO_ASYNC_MODE": "threading"}
WARMUP_S = 0.5  # per type (at most --seconds), before the first timed loop: caches, the pool
PASSWORD = "floor-study-password"
PREFILL = 40  # messages in the room before the first read: a read returns a full page
MIN_SECONDS, MAX_SECONDS = FLOOR_SECONDS  # --seconds, as `lab run --floor-seconds`
DEFAULT_SECONDS = FLOOR_DEFAULT_SECONDS


def app_env(redis_port: int) -> dict[str, str]:
    """The FLASK_* settings the lab gives stage 8's server (runner.Stack.app_env), with
    this Redis, and ASYNC_MODE."""
    stage = stages.get(STAGE)
    return {"FLASK_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "FLASK_SECRET_KEY": secrets.token_hex(16), "FLASK_REDIS_MODE": stage.redis_mode,
            "FLASK_PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000", **stage.env, **ASYNC_MODE}


@contextlib.contextmanager
def environ_set(values: dict[str, str]):
    """os.environ with `values`, as they were afterwards (the app reads FLASK_* there)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def expect(response, status: int) -> dict:
    if response.status_code != status:
        raise StageFailed(f"set-up: {response.request.method} {response.request.path} "
                          f"answered {response.status_code}, not {status}: "
                          f"{response.get_data(as_text=True)[:200]}")
    return response.get_json()


def sign_in(client) -> dict:
    """Two fresh friends, the first signed in, their room with PREFILL messages: what a
    ChatUser has when its tasks start (benchmarks/chat.py open_chat)."""
    people = []
    for who in ("floor-a", "floor-b"):
        name = f"{who}-{uuid.uuid4().hex[:8]}"
        account = {"email": f"{name}@example.test", "password": PASSWORD, "username": name}
        user = expect(client.post("/auth/register", json=account), 201)
        login = expect(client.post("/auth/login", json={"email": account["email"],
                                                        "password": PASSWORD}), 200)
        people.append({**user, "token": login["access_token"]})
    me, friend = people
    for asker, other, status in ((me, friend, 202), (friend, me, 201)):
        expect(client.post("/users/friends", json={"friendId": other["id"]},
                           headers={"Authorization": f"Bearer {asker['token']}"}), status)
    headers = {"Authorization": f"Bearer {me['token']}"}
    room = expect(client.post("/rooms/find-or-create", json={"friendId": friend["id"]},
                              headers=headers), 200)["roomId"]
    for n in range(PREFILL):
        expect(client.post(f"/rooms/{room}/messages", json={"content": f"before {n}"},
                           headers=headers), 201)
    return {"token": me["token"], "room": room, "friend": friend}


def requests(chat: dict) -> dict[str, tuple[str, str, bytes, int]]:
    """Each task of the mix as (method, path, JSON body, expected status), as
    benchmarks/chat.py's ChatUser sends it."""
    room, friend = chat["room"], chat["friend"]
    return {
        "read_messages": ("GET", f"/rooms/{room}/messages?limit={HISTORY_LIMIT}", b"", 200),
        "post_message": ("POST", f"/rooms/{room}/messages", b'{"content": "a message"}', 201),
        "friends": ("GET", "/users/friends", b"", 200),
        "find_or_create_room": ("POST", "/rooms/find-or-create",
                                b'{"friendId": %d}' % friend["id"], 200),
        "me": ("GET", "/users/me", b"", 200),
        "get_user_secure": ("GET", f"/users/getUserSecure/{quote(friend['email'])}", b"", 200),
    }


def caller(app, method: str, path: str, body: bytes, status: int, token: str):
    """A function that sends this request once through the app's WSGI callable and raises
    StageFailed unless it answers `status`: the environ is built once (werkzeug's
    EnvironBuilder), copied per call, so the loop costs little besides the app."""
    from werkzeug.test import EnvironBuilder

    path, _, query = path.partition("?")
    template = EnvironBuilder(path=path, query_string=query, method=method, data=body,
                              content_type="application/json" if body else None,
                              headers={"Authorization": f"Bearer {token}"}).get_environ()
    wanted = f"{status} "
    answered = []

    def start_response(line, headers, exc_info=None):
        answered.append(line)

    def call():
        env = dict(template)
        env["wsgi.input"] = io.BytesIO(body)
        if method == "POST":  # each post a new message, as a client's: a key of its own
            env["HTTP_IDEMPOTENCY_KEY"] = uuid.uuid4().hex
        answered.clear()
        out = app(env, start_response)
        try:
            text = b"".join(out)
        finally:
            if hasattr(out, "close"):
                out.close()
        if not answered or not answered[0].startswith(wanted):
            raise StageFailed(f"{method} {path}: answered {answered[:1] or 'nothing'}, not "
                              f"{status}: {text[:200]!r}")

    return call


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid`, from the scheduler's own count in ns
    (/proc/PID/task/*/schedstat): psutil's cpu_times counts 10 ms ticks, too coarse for
    the Redis of a loop of a tenth of a second."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def busy_seconds(cpus: frozenset[int]) -> float:
    """Time `cpus` spent busy (every state but idle and iowait), from /proc/stat, in s."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name[:3] == "cpu" and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(values) - values[3] - values[4]
    return total / ticks


@contextlib.contextmanager
def watched(app_cpus: frozenset[int], redis_pid: int, redis_shares: bool, out: dict):
    """While the block runs, what else the box did, into `out`: the load average before
    and after, and the share of the app's CPUs that processes other than this one (and
    Redis, when it shares them) used, in % (others_cpu_pct)."""
    load0, busy0, wall0 = os.getloadavg()[0], busy_seconds(app_cpus), time.perf_counter()
    own0, redis0 = time.process_time(), cpu_seconds(redis_pid)
    yield
    wall = time.perf_counter() - wall0
    ours = time.process_time() - own0 + (cpu_seconds(redis_pid) - redis0 if redis_shares else 0)
    others = max(0.0, busy_seconds(app_cpus) - busy0 - ours) / (wall * len(app_cpus))
    out.update({"load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
                "others_cpu_pct": round(100 * others, 1)})


def loop_cost(calls: int = 20000) -> dict[str, float]:
    """The loop's own CPU per request, in us: `caller` around a WSGI app that does nothing,
    a GET and a POST (which makes its key), so the report can say what it adds."""
    def nothing(environ, start_response):
        start_response("200 OK", [])
        return [b"{}"]

    out = {}
    for method, body in (("GET", b""), ("POST", b"{}")):
        call = caller(nothing, method, "/rooms/1/messages", body, 200, token="none")
        started = time.process_time()
        for _ in range(calls):
            call()
        out[method] = round((time.process_time() - started) / calls * 1e6, 2)
    return out


def timed(call, seconds: float, redis_pid: int) -> dict:
    """Requests sent for `seconds` of wall time; the CPU per request, this process's and
    Redis's, and the wall time per request, in ms."""
    cpu0, redis0, wall0 = time.process_time(), cpu_seconds(redis_pid), time.perf_counter()
    end, n = wall0 + seconds, 0
    while time.perf_counter() < end:
        call()
        n += 1
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    redis_cpu = cpu_seconds(redis_pid) - redis0
    return {"requests": n, "app_cpu_ms": 1000 * cpu / n, "redis_cpu_ms": 1000 * redis_cpu / n,
            "wall_ms": 1000 * wall / n}


def measure(app, chat: dict, redis_pid: int, repeats: int, seconds: float) -> list[dict]:
    """[{type: timed(...)} for each repeat]: every type warmed up, then repeats outside,
    types inside, so that a drift of the box spreads over every type."""
    wanted = requests(chat)
    missing = sorted(set(WEIGHTS) - set(wanted))
    if missing:
        raise StageFailed(f"no in-process request for the mix's {missing}: add it to "
                          "requests() in benchmarks/studies/floor.py")
    calls = {name: caller(app, *wanted[name], chat["token"]) for name in WEIGHTS}
    for call in calls.values():
        timed(call, min(WARMUP_S, seconds), redis_pid)
    out = []
    for repeat in range(1, repeats + 1):
        say(f"repeat {repeat}/{repeats}")
        out.append({name: timed(call, seconds, redis_pid) for name, call in calls.items()})
    return out


def check(args) -> None:
    """Every value, before anything starts."""
    if args.repeats < 1 or not MIN_SECONDS <= args.seconds <= MAX_SECONDS:
        raise OptionsError(f"--repeats must be at least 1 and --seconds "
                           f"{MIN_SECONDS:g}-{MAX_SECONDS:g} (got {args.repeats}, "
                           f"{args.seconds:g})")
    if args.lab_repeat is not None and (args.into is None or args.lab_repeat < 1):
        raise OptionsError(f"--lab-repeat {args.lab_repeat}: give it with --into RUN_DIR, "
                           "a repeat of that run from 1 (`lab run --floor` does)")
    if args.into is not None and not results.is_run(args.into):
        raise OptionsError(f"--into {args.into}: not a lab run's folder (no "
                           f"{results.RUN_JSON}); give one under results/, e.g. "
                           "results/latest, or leave --into out for a folder of its own")
    check_cpu_sets(args)
    procs.require_binary("redis-server", procs.REDIS_HINT)
    procs.require_binary("taskset", "Install util-linux (it has taskset).")


def layout(args) -> str:
    """Where Redis runs, as floor.REDIS_CPU names it."""
    return "given" if args.redis_cpus else args.redis_cpu


def placement(args) -> tuple[frozenset[int], frozenset[int]]:
    """(the app's CPUs, Redis's): the app on the lab's server CPU, Redis with it
    (--redis-cpu server) or on the lab's client CPUs (apart); --app-cpus and --redis-cpus
    name others."""
    lab = hosts.placement()
    app = hosts.parse_cpus(args.app_cpus) if args.app_cpus else lab.server
    if args.redis_cpus:
        return app, hosts.parse_cpus(args.redis_cpus)
    return app, app if args.redis_cpu == "server" else lab.client


def run(args) -> int:
    check(args)
    app_cpus, redis_cpus = placement(args)
    if args.lab_repeat:  # `lab run --floor`: the repeat's folder, the report the lab's
        out_dir = results.repeat_dir(Path(args.into), args.lab_repeat)
        out_dir.mkdir(parents=True, exist_ok=True)
    else:
        out_dir = Path(args.into) if args.into else results.new_run(Path(args.results),
                                                                    suffix="floor")
    say(f"floor: stage {STAGE}'s app in-process on CPU {hosts.format_cpus(app_cpus)}, Redis "
        f"on CPU {hosts.format_cpus(redis_cpus)} ({floor.REDIS_CPU[layout(args)]}); "
        f"{args.repeats} repeat(s) of {args.seconds:g} s per request type; results in "
        f"{results.rel(out_dir)}")
    affinity, box = os.sched_getaffinity(0), {}
    with tempfile.TemporaryDirectory(prefix="floor-redis-") as workdir:
        port = procs.free_port()
        redis = procs.start(["taskset", "-c", hosts.format_cpus(redis_cpus),
                             *procs.redis_command(port, Path(workdir))],
                            log=Path(workdir) / "redis.log")
        try:
            procs.wait_for_port(port, proc=redis)
            os.sched_setaffinity(0, app_cpus)
            settings = app_env(port)
            with environ_set(settings):
                from app import create_app  # here: the study's --help needs no Flask
                app = create_app()
            chat = sign_in(app.test_client())
            with watched(app_cpus, redis.pid, bool(app_cpus & redis_cpus), box):
                figures = measure(app, chat, redis.pid, args.repeats, args.seconds)
        finally:
            os.sched_setaffinity(0, affinity)
            procs.stop(redis)
    data = {**environment.environment(), "stage": STAGE,
            "settings": {k: v for k, v in settings.items()
                         if k not in ("FLASK_SECRET_KEY", "FLASK_REDIS_URL")},
            "cpus": {"app": hosts.format_cpus(app_cpus), "redis": hosts.format_cpus(redis_cpus)},
            "redis_cpu": layout(args),
            "seconds": args.seconds, "loop_us": loop_cost(), "box": box, "weights": WEIGHTS,
            "repeats": figures, **({"lab_repeat": args.lab_repeat} if args.lab_repeat else {})}
    floor.write(out_dir, data)
    if args.lab_repeat:
        say(f"{results.rel(out_dir / results.FLOOR_JSON)}: repeat {args.lab_repeat}'s floor")
        return 0
    if args.into:
        from benchmarks.analysis import report
        report.write(out_dir.resolve())
    else:
        floor.write_report(out_dir)
    say("\n" + floor.table(floor.summarize(data)))
    say(f"\nthe loop alone (around a WSGI app that does nothing): {data['loop_us']['GET']:g} "
        f"us a GET, {data['loop_us']['POST']:g} us a POST")
    say(f"\n{results.rel(out_dir / results.FLOOR_JSON)}; "
        f"{results.REPORT_MD} beside it" + (" shows each stage against it" if args.into else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.floor",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="runs of every request type (3)")
    p.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                   help="seconds of requests per type and repeat (default 2)")
    p.add_argument("--into", type=Path, metavar="RUN_DIR",
                   help="write floor.json into this lab run's folder and rebuild its "
                        "report.md (each stage's server CPU per request against the floor)")
    p.add_argument("--lab-repeat", type=int, metavar="K",
                   help="with --into: write into repeat K's folder of the run and leave its "
                        "report to the lab (`lab run --floor` runs it so after each repeat)")
    p.add_argument("--results", default=str(results.RESULTS),
                   help="where the study's own folder goes without --into (results/)")
    add_placement_options(p)
    return p


def add_placement_options(p: argparse.ArgumentParser) -> None:
    """--app-cpus, --redis-cpu and --redis-cpus: where the app in-process and Redis run
    (placement() reads them; the instruments study places its processes alike)."""
    p.add_argument("--app-cpus", metavar="CPUS",
                   help="CPUs of the app in-process (default: the lab's server CPU)")
    p.add_argument("--redis-cpu", choices=("server", "apart"), default="server",
                   help="Redis on the app's CPU as in the stages (server, the default), or "
                        "on the lab's client CPU (apart)")
    p.add_argument("--redis-cpus", metavar="CPUS",
                   help="CPUs of Redis, instead of --redis-cpu's")


def check_cpu_sets(args, names: tuple[str, ...] = ("app_cpus", "redis_cpus")) -> None:
    """Each CPU set option given (`names`, as argparse spells them) parses, or OptionsError
    names it."""
    for name in names:
        spec = getattr(args, name)
        if spec is not None:
            try:
                hosts.parse_cpus(spec)
            except ValueError as e:
                raise OptionsError(f"--{name.replace('_', '-')}: {e}") from e


def after_repeat(run_dir: Path, repeat: int, seconds: float,
                 lab: hosts.Placement) -> None:
    """`lab run --floor`: the study once (one pass of `seconds` per request type) into
    repeat `repeat`'s folder of `run_dir`, the app on the CPUs of the stages' app host and
    Redis on the server roles', as in the stages; its output to floor.log there. A
    subprocess: the app it builds (its Socket.IO listener thread, its Redis pool) must not
    outlive the study in the lab's process. Stopped (TERM: its Redis stopped too) on
    Ctrl-C; StageFailed if it writes no floor."""
    into = results.repeat_dir(run_dir, repeat)
    into.mkdir(parents=True, exist_ok=True)
    app = lab.cpus(["app"])["app"]
    redis = (["--redis-cpu", "server"] if app == lab.server
             else ["--redis-cpus", hosts.format_cpus(lab.server)])
    cmd = [sys.executable, "-m", "benchmarks.studies.floor", "--repeats", "1", "--seconds",
           f"{seconds:g}", "--into", str(run_dir), "--lab-repeat", str(repeat),
           "--app-cpus", hosts.format_cpus(app), *redis]
    log = into / results.FLOOR_LOG
    say(f"lab: the floor of repeat {repeat} ({seconds:g} s per request type; "
        f"{results.rel(log)})")
    proc = procs.start(cmd, log=log, env=procs.child_env(), cwd=stages.ROOT)
    try:
        code = proc.wait(timeout=len(WEIGHTS) * (WARMUP_S + seconds) + 120)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        with sandbox.uninterrupted():  # a second Ctrl-C must not cut its Redis's stop short
            procs.stop(proc)
    if code != 0 or floor.read(into) is None:
        said = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise StageFailed(f"the floor study of repeat {repeat} failed (exit {code}): {said}; "
                          f"see {results.rel(log)}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return cli.main("floor", run, args)


if __name__ == "__main__":
    sys.exit(main())
