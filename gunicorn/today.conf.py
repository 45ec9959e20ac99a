# Stage 8 (todays-stack): stage 7's code on today's gunicorn, the config to copy.
#
# What the measurements picked (lab 13): gevent workers on gunicorn 27, one per
# core, and each response's headers and body in one send (the hook at the end).
# gunicorn's C HTTP parser (gunicorn[fast]) was measured too: parsing is about 3%
# of the server's samples either way, so it is left out.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/today.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's.
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

import math
import os
import pathlib

# `-k gevent`: each connection a greenlet, so a websocket costs a greenlet, not
# a thread (compare gunicorn/gthread.conf.py). The worker monkey-patches the
# standard library before the app is imported; the app states the matching
# Socket.IO mode (FLASK_SOCKETIO_ASYNC_MODE=gevent in the stage).
worker_class = "gevent"


def _quota_cpus(quota: str, period: str) -> int | None:
    """CPUs a CFS quota lets the cgroup use, rounded up (a quota of 1.5 CPUs can keep
    2 workers busy part of the time); None when there is no quota ("max" in cgroup v2,
    -1 in v1)."""
    if quota in ("max", "-1"):
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def _cpus(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup") -> int:
    """The CPUs this process may really use: its affinity, capped by the CPU quota of its
    cgroup and of every cgroup above it (`docker run --cpus=1` and a Kubernetes CPU
    limit set one; affinity alone would count every CPU of the host). cgroup v2: the
    `0::/path` line of /proc/self/cgroup, file cpu.max ("QUOTA PERIOD"); v1: the line
    naming the cpu controller, files cpu.cfs_quota_us and cpu.cfs_period_us."""
    cpus = len(os.sched_getaffinity(0))
    for line in pathlib.Path(proc_cgroup).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            tree, files = pathlib.Path(root), ["cpu.max"]
        elif "cpu" in controllers.split(","):
            tree = pathlib.Path(root, controllers)
            files = ["cpu.cfs_quota_us", "cpu.cfs_period_us"]
        else:
            continue
        # from the cgroup up to the tree's root: in a container the tree's root is
        # often the container's own cgroup, and the path above does not exist there
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = tree.joinpath(*parts[:depth])
            try:
                text = " ".join((folder / f).read_text() for f in files)
            except OSError:  # no such cgroup here, or no cpu controller in it
                continue
            cpus = min(cpus, _quota_cpus(*text.split()) or cpus)
    return cpus


# One process per CPU the server may run on (_cpus above: its affinity and its
# cgroup's CPU quota): in the lab the server roles share one core (CPU 1), so one
# worker, whose greenlets serve every connection. With four processes on that
# core, 42% of the server's samples ended inside a socket send; with one, about
# 20%, and the server's CPU per request fell from 1.05 to about 0.88 ms (lab 13).
# On a server with more cores this gives one worker per core, and in a container
# limited to N CPUs (`docker run --cpus=N`, a Kubernetes CPU limit) N workers;
# gunicorn's master restarts a worker that dies. Several workers and Socket.IO:
# Flask-SocketIO then needs a message queue (the app's FLASK_SOCKETIO_MESSAGE_QUEUE)
# and websocket-only clients or sticky sessions, or a long-polling client's next
# request reaches a worker that does not hold its session (lab 13's migration).
workers = _cpus()
# The connections a worker holds at once, greenlets: past it the worker stops
# accepting and the next connections wait in the kernel's accept queue (then
# their SYNs are dropped), with no line in any log. gunicorn's default, 1,000,
# is what a gevent worker was chosen to go past: stage 9 serves its websockets
# here, and the capacity study (lab 16) takes this one worker to ~10,000 beside
# the other Socket.IO servers, so it is raised past that. The worker's
# file-descriptor limit (20,000 on the lab's box, one descriptor per
# connection) then caps it first, and that one says so ("Too many open files"
# in the log): raise `ulimit -n` with it on your own machine
# (sysctl/limits.conf, lab 07). At the lab's own load (tens of connections)
# nothing changes.
worker_connections = 20000
# As the other keep-alive stages (the book's `--keep-alive 10`), longer than
# Nginx's 5 s, so that Nginx, not gunicorn, closes an idle upstream connection.
keepalive = 10
# gunicorn's default, spelled out: the master kills a worker silent for 30 s.
timeout = 30
# gunicorn's default, spelled out: on SIGTERM workers get 30 s to finish what
# they serve.
graceful_timeout = 30
# gunicorn's default, spelled out: workers are not recycled. With `max_requests`
# a worker exits after that many requests, and with one worker per core (here, on
# the lab's one server core, one worker) every restart stalls every request while
# the next worker starts: p99.9 rose about 12x, to 2-3 s, in every repeat of lab
# 17's study. Recycle only to contain a leak you cannot fix yet, with several
# workers and `max_requests_jitter` (about half of max_requests) so that they do
# not exit together, and with the metrics' child_exit fold below.
max_requests = 0


# One send per response. gunicorn writes a response's headers and its body in two
# sends, and each send is a trip through the kernel's TCP stack on the server's own
# core: with one worker and without this hook, gunicorn's Response.write held 13-14%
# of the server's samples. The hook makes each worker send the headers together
# with the first piece of the body: gunicorn's own write() runs as before (its
# framing and its bookkeeping) on a stand-in for the socket that collects what it
# would have sent, then one send. Only a response whose first write carries body
# bytes and is not chunked changes; an empty or streamed one goes out as gunicorn
# sends it. Measured: 0.80-0.82 ms of the server's CPU per request against
# 0.87-0.90 without it (lab 13). It replaces a method of gunicorn 27's Response
# class (gunicorn/http/wsgi.py), so on another major version it leaves the server
# as it is and says so in the log.
def post_worker_init(worker):
    import gunicorn.http.wsgi

    gunicorn_write = gunicorn.http.wsgi.Response.write
    if not gunicorn.__version__.startswith("27."):
        worker.log.warning("one send per response: not on gunicorn %s (written for 27)",
                           gunicorn.__version__)
        return

    class Held:
        """Stands in for the client's socket while gunicorn writes: keeps the bytes."""

        def __init__(self):
            self.parts = []

        def sendall(self, data):
            self.parts.append(bytes(data))

    def write(response, data):
        if response.headers_sent or response.chunked or not data:
            return gunicorn_write(response, data)
        sock, held = response.sock, Held()
        response.sock = held
        try:
            return gunicorn_write(response, data)
        finally:
            response.sock = sock
            if held.parts:
                sock.sendall(b"".join(held.parts))

    gunicorn.http.wsgi.Response.write = write


# prometheus_client's multiprocess folder (PROMETHEUS_MULTIPROC_DIR, set where the
# server is started, so that every worker inherits it) must be empty when the server
# starts: files of an earlier run would be counted again. The master empties it here,
# before it forks the first worker (the client's documented rule; the lab also gives
# each server a fresh folder). Without PROMETHEUS_MULTIPROC_DIR it does nothing.
def on_starting(server):
    import glob
    import os

    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        os.makedirs(path, exist_ok=True)
        for leftover in glob.glob(os.path.join(path, "*.db")):
            os.remove(leftover)

# With the lab's `--metrics` (or any Prometheus scraping the app's /metrics,
# app/watchers/metrics.py): each worker keeps its metrics in files of its own in
# PROMETHEUS_MULTIPROC_DIR, and /metrics sums them. When a worker exits, prometheus_client's
# documented hook, mark_process_dead, removes only its live gauges' files: its counters and
# histograms stay, one file each per worker that ever ran, and every scrape reads them all, so with
# worker recycling (`max_requests`) the folder and the scrape grow without end
# (prometheus/client_python#275, #367). Here the dead worker's values are folded into
# one file a type (app/watchers/metrics_exit.py): the same totals, a folder the size of the live
# workers. Measured in lab 17 (benchmarks/studies/recycling --metrics-exit none,mark,fold).
# Without PROMETHEUS_MULTIPROC_DIR it does nothing. It loads app/watchers/metrics_exit.py by its
# path, not the app package: the master must not import the app before it forks gevent
# workers, which patch the standard library as they start.
def child_exit(server, worker):
    import importlib.util
    import os

    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    path = os.path.join(server.cfg.chdir, "app", "watchers", "metrics_exit.py")  # the app's folder
    spec = importlib.util.spec_from_file_location("metrics_exit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.fold_dead_worker(worker.pid)


# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
