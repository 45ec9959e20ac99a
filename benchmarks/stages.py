"""The lab's stages, defined once, as data.

Everything else reads this module: the lab runner (`python -m benchmarks.lab`),
`lab up`, the tests and the docs checks. The topology (a host per role, its
address) is data here too. A stage says which server runs the app, how the
app reaches Redis, what (if anything) stands in front, which sysctl profiles
its connecting hosts get, which Locust users load it, and what the attendee
should see, as checks with thresholds.

Metrics the checks name are computed by `benchmarks/analysis/metrics.py`; the
`*_per_request` ones are TIME_WAIT sockets made while the load ran, per
request of the last minute (TIME_WAIT lasts 60 s), so ~1 means "one
connection opened and closed per request" and ~0 means "connections are
reused".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The topology: a host per role, each a network namespace with one address in
# 198.18.0.0/24 (inside 198.18.0.0/15, the range RFC 2544 sets aside for benchmarks,
# so nothing routes it to a real network). benchmarks/sandbox/hosts.py makes them.
# A stage uses the hosts its roles need: `app2` only where it scales out (stage 6).
@dataclass(frozen=True)
class Host:
    role: str
    address: str
    runs: str


HOSTS: tuple[Host, ...] = (
    Host("client", "198.18.0.10", "Locust (its master, with --client-hosts 2)"),
    Host("client2", "198.18.0.11", "a second Locust worker, with --client-hosts 2"),
    Host("proxy", "198.18.0.20", "Nginx, in stages with a front"),
    Host("app", "198.18.0.30", "the app server"),
    Host("app2", "198.18.0.31", "a second app server, in stages that scale out"),
    Host("redis", "198.18.0.40", "Redis"),
)
ADDRESS = {h.role: h.address for h in HOSTS}
APP_ROLES = ("app", "app2")  # the app hosts, in order: a stage with N uses the first N
CLIENT_ROLES = ("client", "client2")  # the load hosts: a run with --client-hosts N, the first N
SERVER_ROLES = ("proxy", *APP_ROLES, "redis")  # one CPU set; the client has the other
# The load generator's host gets these profiles on top of the baseline (sysctl/90-client.conf:
# a wide port range, so that Locust never runs out of local ports).
CLIENT_SYSCTL = ("baseline", "client")

# Each host has its own ports, so the lab uses the well-known ones and the
# exercises can show them as they are.
REDIS_PORT = 6379
APP_PORT = 8000
FRONT_PORT = 8080
# Nginx's connections per worker process (nginx/nginx.conf); 5w makes it small.
NGINX_WORKER_CONNECTIONS = 4096

# Server commands, with {app_host} and {app_port} filled in. `flask`/`gunicorn` are
# the venv's (the docs say `source .venv/bin/activate` first). A gunicorn stage's
# settings live in its config file under gunicorn/ (what a user copies to a real
# machine); only the address, which is the host's, stays on the command line.
BUILTIN = ("flask", "--app", "app", "run", "--host", "{app_host}", "--port", "{app_port}")
GUNICORN_SYNC = ("gunicorn", "-c", "gunicorn/sync.conf.py", "-b", "{app_host}:{app_port}",
                 "app.wsgi:app")
# gunicorn 26 removed the eventlet worker: requirements.txt pins 25.x for this stage.
GUNICORN_EVENTLET = ("gunicorn", "-c", "gunicorn/eventlet.conf.py", "-b", "{app_host}:{app_port}",
                     "app.wsgi:app")
GUNICORN_GEVENT = ("gunicorn", "-c", "gunicorn/gevent.conf.py", "-b", "{app_host}:{app_port}",
                   "app.wsgi:app")
# One worker: gunicorn hands each request to any of its workers, so a long-polling
# Socket.IO session survives only where one process serves the host (Flask-SocketIO's
# deployment docs); stickiness across hosts is then Nginx's job.
# An accept queue of 16 (the failure twin 2b): sync workers leave connections waiting
# there, and past 16 the kernel drops the SYN.
GUNICORN_SYNC_BACKLOG = ("gunicorn", "-c", "gunicorn/sync-backlog-16.conf.py",
                         "-b", "{app_host}:{app_port}", "app.wsgi:app")
# A keep-alive of 1 s, shorter than Nginx's (the failure twin 5k: the keep-alive race).
GUNICORN_EVENTLET_SHORT = ("gunicorn", "-c", "gunicorn/eventlet-short-keepalive.conf.py",
                           "-b", "{app_host}:{app_port}", "app.wsgi:app")
GUNICORN_EVENTLET_ONE = ("gunicorn", "-c", "gunicorn/eventlet-one-worker.conf.py",
                         "-b", "{app_host}:{app_port}", "app.wsgi:app")

# The locustfiles, as Locust is given them (by path, from the repository root).
LOCUSTFILE = "benchmarks/chat.py"  # every stage's users
KV_LOCUSTFILE = "benchmarks/kv.py"  # the book's benchmark, KeyValueUser

HTTP_USERS = ("ChatUser",)
# Socket.IO needs an async worker (a sync worker would be held by each socket).
ASYNC_USERS = ("ChatUser", "SocketIOChatUser")


@dataclass(frozen=True)
class Check:
    """An expected phenomenon: `metric op threshold`, with the reason."""

    metric: str
    op: str  # ">=", "<=" or "=="
    threshold: float
    why: str
    # left out when its metric is None: a figure only some runs have (py-spy's, when
    # it is installed and allowed), whose absence says nothing about the stage
    optional: bool = False

    def expected(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"

    def passes(self, value: float | None) -> bool:
        if value is None:
            return False
        return {">=": value >= self.threshold, "<=": value <= self.threshold,
                "==": value == self.threshold}[self.op]


@dataclass(frozen=True, kw_only=True)
class Stage:
    key: str  # "0".."5"; gevent twins end in "g"
    slug: str
    title: str
    server: tuple[str, ...]
    redis_mode: str  # "per-request" | "pool"
    front: str | None  # its Nginx conf.d file, under nginx/ (`conf.d/proxy.conf`), or None
    sysctl: tuple[str, ...]  # profile names (sysctl/NN-<name>.conf), applied in order
    users: tuple[str, ...]
    checks: tuple[Check, ...]
    see: str  # what the attendee should see, one sentence
    twin_of: str | None = None
    failure: bool = False  # a failure twin: in the `failures` set, not in `all` (lab 11)
    worker_connections: int = NGINX_WORKER_CONNECTIONS  # Nginx's, per worker process
    env: dict = field(default_factory=dict)
    app_hosts: int = 1  # app servers, each on its own host, behind the stage's Nginx
    balance: str | None = None  # Nginx's upstream method (`ip_hash`); None: round robin
    socketio_transport: str = "websocket"  # the Socket.IO users': websocket or polling
    client_hosts: int = 1  # load hosts it needs at least (a run's --client-hosts may add)
    burst_every: float = 0.0  # the chat users' bursts (--chat-burst-every); 0: a steady load

    def __post_init__(self):
        if not 1 <= self.app_hosts <= len(APP_ROLES):
            raise ValueError(f"stage {self.key}: app_hosts must be 1-{len(APP_ROLES)}")
        if self.app_hosts > 1 and not self.front:
            raise ValueError(f"stage {self.key}: several app hosts need a proxy in front")
        if not 1 <= self.client_hosts <= len(CLIENT_ROLES):
            raise ValueError(f"stage {self.key}: client_hosts must be 1-{len(CLIENT_ROLES)}")
        if self.socketio_transport not in ("websocket", "polling"):
            raise ValueError(f"stage {self.key}: socketio_transport is websocket or polling")

    @property
    def dirname(self) -> str:
        """Folder name of this stage inside a results run: `03-eventlet-keepalive`."""
        number, twin = re.match(r"(\d+)(\w*)$", self.key).groups()
        return f"{int(number):02d}{twin}-{self.slug}"

    def server_command(self, app_host: str = ADDRESS["app"],
                       app_port: int = APP_PORT) -> list[str]:
        return [part.format(app_host=app_host, app_port=app_port) for part in self.server]

    @property
    def chat_settings(self) -> dict[str, object]:
        """The chat scenario's settings (benchmarks/chat.py, `--chat-NAME`) this stage
        gives other than their defaults, so most stages' command lines stay as the
        docs show them."""
        found = {"socketio-transport": self.socketio_transport, "burst-every": self.burst_every}
        defaults = {"socketio-transport": "websocket", "burst-every": 0.0}
        return {name: value for name, value in found.items() if value != defaults[name]}

    @property
    def gunicorn_config(self) -> str | None:
        """The gunicorn config file the server command names (`-c gunicorn/sync.conf.py`),
        relative to the repository root; None for a server that is not gunicorn."""
        server = list(self.server)
        if "gunicorn" not in server or "-c" not in server:
            return None
        return server[server.index("-c") + 1]

    @property
    def app_roles(self) -> tuple[str, ...]:
        """The app hosts: `("app",)`, or `("app", "app2")` in a stage that scales out."""
        return APP_ROLES[:self.app_hosts]

    @property
    def roles(self) -> tuple[str, ...]:
        """The hosts this stage needs: the proxy only when it has a front, `app2` only
        when it has two app hosts, `client2` only when it needs two load hosts."""
        unused = {"proxy"} if not self.front else set()
        unused |= set(APP_ROLES[self.app_hosts:]) | set(CLIENT_ROLES[self.client_hosts:])
        return tuple(h.role for h in HOSTS if h.role not in unused)

    def clients_for(self, client_hosts: int = 1) -> tuple[str, ...]:
        """Its load hosts in a run with --client-hosts `client_hosts`: at least its own."""
        return CLIENT_ROLES[:max(client_hosts, self.client_hosts)]

    def roles_with_clients(self, client_hosts: int = 1) -> tuple[str, ...]:
        """The stage's hosts with `client_hosts` load hosts (a run's --client-hosts)."""
        clients = self.clients_for(client_hosts)
        return tuple(h.role for h in HOSTS if h.role in self.roles or h.role in clients)

    @property
    def connecting_roles(self) -> tuple[str, ...]:
        """Hosts whose outgoing connections churn, and so get the stage's `tcp_tw_reuse`
        and narrowed port range, as real servers would: the app toward Redis, and the
        proxy toward the app. The others keep the baseline."""
        return ("proxy", *self.app_roles) if self.front else self.app_roles

    def host_classes(self) -> dict[str, tuple[str, str, int]]:
        """The sampler's classes on hosts: name -> (connecting host, listening host, port);
        several app hosts are one side of a class, joined by `+` (`app+app2`)."""
        apps = "+".join(self.app_roles)
        if self.front:
            return {"redis": (apps, "redis", REDIS_PORT),
                    "upstream": ("proxy", apps, APP_PORT),
                    "front": ("client", "proxy", FRONT_PORT)}
        return {"redis": (apps, "redis", REDIS_PORT), "front": ("client", apps, APP_PORT)}

    def connection_classes(self, redis_port: int = REDIS_PORT, app_port: int = APP_PORT,
                           front_port: int = FRONT_PORT) -> dict[str, int]:
        """The sampler's connection classes: name -> the port that marks them."""
        if self.front:
            return {"redis": redis_port, "upstream": app_port, "front": front_port}
        return {"redis": redis_port, "front": app_port}


def _ge(metric, threshold, why):
    return Check(metric, ">=", threshold, why)


def _le(metric, threshold, why):
    return Check(metric, "<=", threshold, why)


def _eq(metric, threshold, why):
    return Check(metric, "==", threshold, why)


REDIS_CHURN = _ge("tw_redis_per_request", 0.5,
                  "a new Redis connection per request, closed by the app: "
                  "one TIME_WAIT toward Redis per request")
REDIS_REUSED = _le("tw_redis_per_request", 0.05,
                   "the pool reuses its Redis connections: no TIME_WAIT toward Redis")
# Stage 1 spent 0.67 of the app's profiled CPU connecting to and closing Redis (issue 18's
# run, benchmarks/profile/buckets.py; stage 2 then 0.002); the pool should cut that by more
# than 80%: below 0.2 x 0.67.
CONNECT_CPU_GONE = Check("cpu_share_redis_connect", "<=", 0.13,
                         "the pool connects once per worker: connecting to and closing Redis, "
                         "0.67 of the app's CPU in stage 1, drops by more than 80% (py-spy)",
                         optional=True)
# Stage 5 spent 0.03-0.05 of the app's profiled CPU in the token check (issue 18's runs),
# stage 7 0.013-0.019: its signature checked once per process, its key in the view's own
# round trip. (Stage 7's CPU per request against stage 5's: tests/lab/test_lab.py.)
TOKEN_CPU_DOWN = Check("cpu_share_token", "<=", 0.03,
                       "the token's signature checked once per process, its key fetched in "
                       "the view's own round trip to Redis: the check's share of the app's "
                       "CPU drops (py-spy)", optional=True)
REDIS_OPEN = _ge("estab_redis_peak", 1, "the pool's connections stay ESTABLISHED")
FRONT_CHURN = _ge("tw_front_per_request", 0.2,
                  "a sync worker answers `Connection: close`: a client connection opened "
                  "and closed per request (under heavy load fewer than one TIME_WAIT each: "
                  "a client reconnecting from the same port takes over the server's)")
FRONT_CLOSE_HEADER = _eq("server_keepalive", 0, "the app answers `Connection: close`")
FRONT_KEEPALIVE = _eq("server_keepalive", 1, "the app answers `Connection: keep-alive`")
FRONT_REUSED = _le("tw_front_per_request", 0.05,
                   "clients keep their connection: no TIME_WAIT on the entry port")
PORTS_EXHAUSTED = _ge("upstream_ports_in_time_wait", 0.9,
                      "Nginx closes every upstream connection and holds its local port "
                      "for 60 s: the narrowed port range fills up")
EADDRNOTAVAIL = _ge("nginx_eaddrnotavail", 1,
                    "Nginx logs `(99: Cannot assign requested address)`")
FAILED = _ge("failures", 1, "requests fail with 502 once no local port is free")
UPSTREAM_REUSED = _le("tw_upstream_per_request", 0.05,
                      "Nginx reuses its cached upstream connections: ~0 TIME_WAIT")
NO_EADDRNOTAVAIL = _eq("nginx_eaddrnotavail", 0, "no connect() failure in Nginx's error log")
NO_FAILURES = _eq("failures", 0, "every request answered")
SPREAD_LOW = _ge("app_share_min", 0.35,
                 "Nginx spreads the requests: each app host answers at least 35% (its access log)")
SPREAD_HIGH = _le("app_share_max", 0.65, "and none answers more than 65%")
DELIVERED = _eq("cross_host_delivered", 1,
                "a message sent on one app host reaches a room member connected to the "
                "other: the app servers share Socket.IO's rooms through Redis")
NO_SEQ_GAPS = _eq("cross_host_seq_gaps", 0, "the member sees the room's `seq` without a gap")
POLLING_400S = _ge("sio_session_400s", 1,
                   "round robin sends a polling session's requests to either app host; the "
                   "one that did not open the session answers 400")
POLLING_FAILS = _ge("sio_failures", 1, "so the Socket.IO users fail to connect")
POLLING_WORKS = _eq("sio_failures", 0,
                    "every poll of a session reaches the app host that opened it")
NO_400S = _eq("sio_session_400s", 0, "no poll lands on a host without its session")
PINNED = _ge("app_share_max", 0.99,
             "ip_hash keys an IPv4 client on its first three octets: every client of the "
             "lab's 198.18.0.0/24 lands on one app host")
TWO_KEYS = _ge("app_share_max", 0.99,
               "the hash has two keys, the client hosts' addresses, and on Nginx's "
               "consistent-hash ring both fall to one app host: a hash spreads many "
               "clients, not two load generators")
TW_CAPPED = _le("tw_redis_peak", 4096,
                "TIME_WAIT stops at net.ipv4.tcp_max_tw_buckets (4,096 here, as in seed 004's "
                "`ss -s`): the app host keeps no more")
TW_OVERFLOWED = _ge("tw_overflow", 1,
                    "the kernel counts each connection it closed without a TIME_WAIT "
                    "(TCPTimeWaitOverflow, `time wait bucket table overflow`)")
LISTEN_OVERFLOWED = _ge("listen_overflows", 1,
                        "connections wait in the accept queue while the sync workers are "
                        "busy; past 16 the kernel drops the SYN (ListenOverflows)")
NOT_ENOUGH = _ge("nginx_worker_connections", 1,
                 "Nginx logs `worker_connections are not enough`: each worker may hold 32 "
                 "connections, and each proxied request needs two (client and upstream)")
CUT_OFF = _ge("failures", 1,
              "to make room a worker closes idle keep-alive connections (`reusing "
              "connections`), and requests sent on them as it does fail")
SYN_RETRIED = _ge("p99_ms", 900,
                  "a dropped SYN is sent again after 1 s: the slowest requests take a second "
                  "longer, with no error anywhere")
RACED = _ge("upstream_prematurely_closed", 1,
            "Nginx sends a request on a cached connection just as gunicorn, idle for its "
            "1 s keep-alive, closes it: the request meets a reset or a FIN")
POST_502 = _ge("post_502s", 1,
               "Nginx retries a GET on a new connection, never a POST: a POST is answered 502")
POLLING = {"FLASK_SOCKETIO_TRANSPORTS": "polling,websocket"}  # the app accepts polling
# Stage 7: the app's own hot costs removed, each a setting (app/fast_path.py says which).
CODE_ITSELF = {"FLASK_FUSED_ROUND_TRIPS": "1", "FLASK_TOKEN_CACHE_SIZE": "4096",
               "FLASK_JSON_PROVIDER": "orjson", "FLASK_COOKIE_SESSION": "0",
               "FLASK_ENGINEIO_EVERY_PATH": "0"}

STAGES: tuple[Stage, ...] = (
    Stage(key="0", slug="builtin", title="Flask's built-in server",
          server=BUILTIN, redis_mode="per-request", front=None, sysctl=("baseline",),
          users=HTTP_USERS, checks=(REDIS_CHURN,),
          see="TIME_WAIT toward Redis grows with every request"),
    Stage(key="1", slug="gunicorn-sync", title="gunicorn sync workers",
          server=GUNICORN_SYNC, redis_mode="per-request", front=None, sysctl=("baseline",),
          users=HTTP_USERS, checks=(REDIS_CHURN, FRONT_CHURN, FRONT_CLOSE_HEADER),
          see="more throughput on 2+ cores; the server closes every client connection"),
    Stage(key="2", slug="connection-pool", title="a Redis connection pool",
          server=GUNICORN_SYNC, redis_mode="pool", front=None, sysctl=("baseline",),
          users=HTTP_USERS, checks=(REDIS_REUSED, REDIS_OPEN, FRONT_CHURN, CONNECT_CPU_GONE),
          see="TIME_WAIT toward Redis ~0, a few ESTABLISHED per worker, throughput up"),
    Stage(key="3", slug="eventlet-keepalive", title="eventlet workers with keep-alive",
          server=GUNICORN_EVENTLET, redis_mode="pool", front=None, sysctl=("baseline",),
          users=ASYNC_USERS, checks=(REDIS_REUSED, FRONT_REUSED, FRONT_KEEPALIVE),
          see="`Connection: keep-alive`; client-side churn gone"),
    Stage(key="3g", slug="gevent-keepalive", title="gevent workers with keep-alive",
          server=GUNICORN_GEVENT, redis_mode="pool", front=None, sysctl=("baseline",),
          users=ASYNC_USERS, checks=(REDIS_REUSED, FRONT_REUSED, FRONT_KEEPALIVE),
          see="the same as stage 3, on gevent", twin_of="3"),
    Stage(key="4", slug="nginx-proxy", title="Nginx in front, no upstream keep-alive",
          server=GUNICORN_EVENTLET, redis_mode="pool", front="conf.d/proxy.conf",
          sysctl=("baseline", "narrow-ports"),
          users=ASYNC_USERS, checks=(PORTS_EXHAUSTED, EADDRNOTAVAIL, FAILED),
          see="TIME_WAIT between Nginx and the app; local ports run out, "
              "`(99: Cannot assign requested address)`, 502s"),
    Stage(key="4g", slug="nginx-proxy-gevent",
          title="Nginx in front, no upstream keep-alive (gevent)",
          server=GUNICORN_GEVENT, redis_mode="pool", front="conf.d/proxy.conf",
          sysctl=("baseline", "narrow-ports"),
          users=ASYNC_USERS, checks=(PORTS_EXHAUSTED, EADDRNOTAVAIL, FAILED),
          see="the same as stage 4, on gevent", twin_of="4"),
    Stage(key="5", slug="upstream-keepalive", title="Nginx upstream keep-alive + tcp_tw_reuse",
          server=GUNICORN_EVENTLET, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, checks=(UPSTREAM_REUSED, NO_EADDRNOTAVAIL, NO_FAILURES),
          see="errors gone, Nginx-to-app TIME_WAIT ~0"),
    Stage(key="5g", slug="upstream-keepalive-gevent",
          title="Nginx upstream keep-alive + tcp_tw_reuse (gevent)",
          server=GUNICORN_GEVENT, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, checks=(UPSTREAM_REUSED, NO_EADDRNOTAVAIL, NO_FAILURES),
          see="the same as stage 5, on gevent", twin_of="5"),
    Stage(key="6", slug="scale-out", title="two app hosts behind Nginx",
          server=GUNICORN_EVENTLET, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2,
          checks=(SPREAD_LOW, SPREAD_HIGH, DELIVERED, NO_SEQ_GAPS, UPSTREAM_REUSED,
                  NO_FAILURES),
          see="the requests split over two app hosts; a Socket.IO message crosses from one "
              "to the other through Redis"),
    Stage(key="6g", slug="scale-out-gevent", title="two app hosts behind Nginx (gevent)",
          server=GUNICORN_GEVENT, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2,
          checks=(SPREAD_LOW, SPREAD_HIGH, DELIVERED, NO_SEQ_GAPS, UPSTREAM_REUSED,
                  NO_FAILURES),
          see="the same as stage 6, on gevent", twin_of="6"),
    Stage(key="6p", slug="scale-out-polling", title="two app hosts, polling clients, round robin",
          server=GUNICORN_EVENTLET_ONE, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2, env=POLLING,
          socketio_transport="polling",
          checks=(SPREAD_LOW, SPREAD_HIGH, POLLING_400S, POLLING_FAILS),
          see="Socket.IO over long-polling breaks: a session's polls land on both app hosts",
          twin_of="6"),
    Stage(key="6i", slug="scale-out-ip-hash", title="two app hosts, polling clients, ip_hash",
          server=GUNICORN_EVENTLET_ONE, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2, env=POLLING,
          socketio_transport="polling", balance="ip_hash",
          checks=(NO_400S, POLLING_WORKS, NO_FAILURES, PINNED),
          see="polling works again, and every client of the /24 is pinned to one app host",
          twin_of="6"),
    Stage(key="6h", slug="scale-out-hash", title="two app hosts, polling clients, "
          "hash $remote_addr", server=GUNICORN_EVENTLET_ONE, redis_mode="pool",
          front="conf.d/upstream-keepalive.conf", sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, app_hosts=2, env=POLLING, socketio_transport="polling", client_hosts=2,
          balance="hash $remote_addr consistent",
          checks=(NO_400S, POLLING_WORKS, NO_FAILURES, TWO_KEYS),
          see="polling works; the two client hosts' addresses both hash to one app host",
          twin_of="6"),
    Stage(key="7", slug="profile-then-fix", title="the code itself: one round trip per request",
          server=GUNICORN_EVENTLET, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, env=CODE_ITSELF,
          checks=(TOKEN_CPU_DOWN, UPSTREAM_REUSED, NO_FAILURES),
          see="stage 5's stack, with the profile's hot spots gone from the app's code: "
              "less CPU per request, more requests per second"),
    # the failures set (`--stages failures`, lab 11): each beside its base stage
    Stage(key="0t", slug="time-wait-cap", title="Flask's built-in server, TIME_WAIT capped",
          server=BUILTIN, redis_mode="per-request", front=None, sysctl=("baseline", "tw-cap"),
          users=HTTP_USERS, checks=(TW_CAPPED, TW_OVERFLOWED, NO_FAILURES),
          see="TIME_WAIT plateaus at 4,096; the kernel counts the rest as overflow",
          twin_of="0", failure=True),
    Stage(key="5w", slug="worker-connections",
          title="Nginx upstream keep-alive, 32 worker_connections",
          server=GUNICORN_EVENTLET, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, worker_connections=32,
          checks=(NOT_ENOUGH, CUT_OFF),
          see="Nginx runs out of connections by its own configuration, with CPU to spare: "
              "it closes keep-alive connections, requests fail, TIME_WAIT is back",
          twin_of="5", failure=True),
    Stage(key="5k", slug="keepalive-race",
          title="Nginx upstream keep-alive, the app's keep-alive shorter than Nginx's",
          server=GUNICORN_EVENTLET_SHORT, redis_mode="pool",
          front="conf.d/upstream-keepalive.conf", sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, burst_every=1.05, checks=(RACED, POST_502),
          see="users that pause leave Nginx's connections idle until gunicorn closes them, "
              "sometimes under a request: POSTs answered 502",
          twin_of="5", failure=True),
    Stage(key="2b", slug="small-backlog", title="gunicorn sync workers, an accept queue of 16",
          server=GUNICORN_SYNC_BACKLOG, redis_mode="pool", front=None,
          sysctl=("baseline", "small-backlog"), users=HTTP_USERS,
          checks=(LISTEN_OVERFLOWED, SYN_RETRIED),
          see="the accept queue overflows: ListenOverflows counts, p99 jumps by 1 s",
          twin_of="2", failure=True),
)
MAIN = tuple(s for s in STAGES if not s.failure)  # `all`: the main line and its twins
FAILURES = tuple(s for s in STAGES if s.failure)  # `failures`, with their base stages

BY_KEY = {s.key: s for s in STAGES}
BY_SLUG = {s.slug: s for s in STAGES}


def locustfile(user_classes) -> str:
    """The locustfile that holds these user classes."""
    return KV_LOCUSTFILE if "KeyValueUser" in user_classes else LOCUSTFILE


def get(name: str) -> Stage:
    """A stage by key (`3`, `3g`) or slug (`eventlet-keepalive`)."""
    stage = BY_KEY.get(name) or BY_SLUG.get(name)
    if stage is None:
        known = ", ".join(f"{s.key} ({s.slug})" for s in STAGES)
        raise KeyError(f"unknown stage {name!r}; known stages: {known}")
    return stage


def select(spec: str) -> list[Stage]:
    """`all` (the main line), `failures` (the failure twins and their base stages), or a
    comma/space separated list of keys or slugs (and of those sets), in registry order.
    A failure twin runs beside its base stage, under the same load: naming one without
    its base is an error."""
    parts = spec.replace(",", " ").split()
    if not parts:
        raise KeyError("no stage named: give all, failures, or keys such as 0,2")
    wanted: set[str] = set()
    for part in parts:
        if part == "all":
            wanted |= {s.key for s in MAIN}
        elif part == "failures":
            wanted |= {s.key for s in FAILURES} | {s.twin_of for s in FAILURES}
        else:
            wanted.add(get(part).key)
    alone = [s for s in FAILURES if s.key in wanted and s.twin_of not in wanted]
    if alone:
        twins = ", ".join(f"{s.key} (base {s.twin_of})" for s in alone)
        both = ",".join(sorted({*(s.twin_of for s in alone), *(s.key for s in alone)},
                               key=lambda key: _order(BY_KEY[key])))
        raise KeyError(f"failure twin(s) {twins} run beside their base stage: "
                       f"--stages {both}, or --stages failures")
    return sorted((s for s in STAGES if s.key in wanted), key=_order)


def _order(stage: Stage) -> tuple[int, int]:
    """Registry order, a failure twin right after its base stage."""
    if stage.failure:
        return STAGES.index(BY_KEY[stage.twin_of]), STAGES.index(stage)
    return STAGES.index(stage), 0


def sysctl_file(name: str) -> Path:
    """The file of profile `name` (`tuned`): sysctl/NN-<name>.conf, numbered in the
    order the lab applies the profiles, as /etc/sysctl.d applies them."""
    found = sorted((ROOT / "sysctl").glob(f"[0-9][0-9]-{name}.conf"))
    if len(found) != 1:
        raise FileNotFoundError(f"sysctl profile {name!r}: expected one sysctl/NN-{name}.conf, "
                                f"found {[p.name for p in found] or 'none'}")
    return found[0]


def sysctl_profile(name: str) -> dict[str, str]:
    """`key = value` lines of the profile's sysctl/NN-<name>.conf, in order (sysctl.d
    format)."""
    settings: dict[str, str] = {}
    for raw in sysctl_file(name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = " ".join(value.split())
    return settings


def merged_profiles(names) -> dict[str, str]:
    """The profiles' files (sysctl/NN-<name>.conf), merged in order (later wins)."""
    merged: dict[str, str] = {}
    for name in names:
        merged.update(sysctl_profile(name))
    return merged


def client_sysctls() -> dict[str, str]:
    """The client host's sysctls (CLIENT_SYSCTL)."""
    return merged_profiles(CLIENT_SYSCTL)


def stage_sysctls(stage: Stage) -> dict[str, str]:
    """The stage's sysctls: its profiles merged in order (later wins)."""
    return merged_profiles(stage.sysctl)
