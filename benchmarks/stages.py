"""The lab's stages, defined once, as data.

Everything else reads this module: the lab runner (`python -m benchmarks.lab`), `lab
up`, the tests and the docs checks. The topology (a host per role, its address) is data
here too. A stage says which server runs the app, how the app reaches Redis, what stands in
front, which sysctl profiles its connecting hosts get, which Locust users load it, and what
the attendee should see, as checks with thresholds (benchmarks/checks.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from benchmarks.checks import (  # the stages' checks, each with its reason
    CONNECT_CPU_GONE,
    CUT_OFF,
    DELIVERED,
    DELIVERED_OVER_HTTP,
    EADDRNOTAVAIL,
    FAILED,
    FRONT_CHURN,
    FRONT_CLOSE_HEADER,
    FRONT_KEEPALIVE,
    FRONT_REUSED,
    LISTEN_OVERFLOWED,
    NO_400S,
    NO_EADDRNOTAVAIL,
    NO_FAILURES,
    NO_SEQ_GAPS,
    NOT_ENOUGH,
    PINNED,
    POLLING_400S,
    POLLING_FAILS,
    POLLING_WORKS,
    PORTS_EXHAUSTED,
    POST_502,
    RACED,
    RECOVERED,
    REDIS_CHURN,
    REDIS_OPEN,
    REDIS_REUSED,
    SOCKETIO_SERVED,
    SPANS_NONE_LOST,
    SPREAD_HIGH,
    SPREAD_LOW,
    SYN_RETRIED,
    TOKEN_CPU_DOWN,
    TW_CAPPED,
    TW_OVERFLOWED,
    TWO_KEYS,
    UPSTREAM_REUSED,
    UPSTREAM_SOCKETIO_REUSED,
    WEBSOCKETS_SERVED,
    Check,
)
from benchmarks.servers import (  # the servers, re-exported: `stages.GUNICORN_TODAY`
    BUILTIN,
    CODE_ITSELF,
    CURRENT,
    ENVIRONMENTS,
    EVENTLET,
    GRANIAN_ASGI,
    GRANIAN_TODAY,
    GREENLET_TREE,
    GUNICORN_EVENTLET,
    GUNICORN_EVENTLET_ONE,
    GUNICORN_EVENTLET_REALTIME,
    GUNICORN_EVENTLET_SHORT,
    GUNICORN_GEVENT,
    GUNICORN_GTHREAD,
    GUNICORN_GTHREAD_REALTIME,
    GUNICORN_REALTIME,
    GUNICORN_SYNC,
    GUNICORN_SYNC_BACKLOG,
    GUNICORN_TODAY,
    LIBRARY_GREENLETS,
    METRICS_ON,
    NGINX_SIZE,
    POLLING,
    ROOT,  # noqa: F401 (re-exported: stages.ROOT)
    SPLIT,
    THREADING,
    TODAY,
    TRACED,
    TRACED_10,
    WEBSOCKET_FRONT,
    NginxSize,
    command_environment,
)
from benchmarks.servers import Environment as Environment
from benchmarks.servers import worker_environment as worker_environment
from benchmarks.sysctl_profiles import merged_profiles, sysctl_file, sysctl_profile  # noqa: F401


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
    Host("metrics", "198.18.0.50", "Prometheus, with --metrics (exporters: on their hosts)"),
)
ADDRESS = {h.role: h.address for h in HOSTS}
APP_ROLES = ("app", "app2")  # the app hosts, in order: a stage with N uses the first N
CLIENT_ROLES = ("client", "client2")  # the load hosts: a run with --client-hosts N, the first N
SERVER_ROLES = ("proxy", *APP_ROLES, "redis")  # one CPU set; the client has the other
# The host that watches (--metrics: benchmarks/run/prometheus.py), which a run adds: on the
# client's CPUs, as the sampler, off the measured servers' core (hosts.Placement).
METRICS_ROLE = "metrics"
# The load generator's host gets these profiles on top of the baseline (sysctl/90-client.conf:
# a wide port range, so that Locust never runs out of local ports).
CLIENT_SYSCTL = ("baseline", "client")

# Each host has its own ports, so the lab uses the well-known ones and the
# exercises can show them as they are.
REDIS_PORT = 6379
APP_PORT = 8000
SOCKETIO_PORT = 8001  # stage 9's Socket.IO server, beside APP_PORT's HTTP one
FRONT_PORT = 8080
OTLP_PORT = 4318  # OTLP/HTTP's: the span sink's, on the metrics host (benchmarks/run/spans.py)
PROMETHEUS_PORT, NGINX_EXPORTER_PORT, REDIS_EXPORTER_PORT = 9090, 9113, 9121  # their defaults
# The locustfiles, as Locust is given them (by path, from the repository root).
LOCUSTFILE = "benchmarks/chat.py"  # every stage's users
KV_LOCUSTFILE = "benchmarks/kv.py"  # the book's benchmark, KeyValueUser
ARRIVALS_LOCUSTFILE = "benchmarks/arrivals.py"  # the open model (--arrival-rate), ArrivalUser
# (and PacedUser, the closed model paced to the same rate: benchmarks/studies/omission.py)

HTTP_USERS = ("ChatUser",)
# Socket.IO needs an async worker (a sync worker would be held by each socket).
ASYNC_USERS = ("ChatUser", "SocketIOChatUser")


# Named sets: `make lab` runs the main line; every twin is in one set of its own, which
# runs with the base stages its twins are measured against (`--stages gevent`).
@dataclass(frozen=True)
class StageSet:
    name: str
    lab: str  # the lab that teaches it (exercises/NN-*.md)
    about: str


SETS = {s.name: s for s in (
    StageSet("main", "labs 01-06, 12, 13", "the main line, one change a step (make lab)"),
    StageSet("gevent", "labs 04-06", "the eventlet stages' gevent twins, beside them"),
    StageSet("scale-out", "lab 10", "two app hosts: round robin, polling, sticky sessions"),
    StageSet("failures", "lab 11", "failures from production, each beside its base stage"),
    StageSet("today", "labs 13, 15", "today's servers beside the book's eventlet: gthread, "
             "granian"),
    StageSet("realtime", "lab 16", "stage 9's Socket.IO server on eventlet, threads and "
             "asyncio beside gevent, and stage 10 set to hold users, for the capacity study"),
    StageSet("watched", "lab 17", "stage 9 with its metrics, and with its traces to a span "
             "sink (all of them, a tenth)"),
)}
EVERYTHING = "everything"  # every stage of every set


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
    set_name: str = "main"  # its named set (SETS): the main line, or a set of twins
    nginx: NginxSize = NGINX_SIZE  # its Nginx's processes (nginx/nginx.conf), if a front
    env: dict = field(default_factory=dict)
    app_hosts: int = 1  # app servers, each on its own host, behind the stage's Nginx
    balance: str | None = None  # Nginx's upstream method (`ip_hash`); None: round robin
    socketio_transport: str = "websocket"  # the Socket.IO users': websocket or polling
    client_hosts: int = 1  # load hosts it needs at least (a run's --client-hosts may add)
    burst_every: float = 0.0  # the chat users' bursts (--chat-burst-every); 0: a steady load
    environment: str = CURRENT  # the venv `server` starts from (ENVIRONMENTS)
    # A server of its own for the Socket.IO path, on SOCKETIO_PORT of each app host, which
    # the stage's Nginx file routes /socket.io/ to; None: `server` serves both. Its
    # environment follows from its worker class (server_environment).
    socketio_server: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.set_name not in SETS:
            raise ValueError(f"stage {self.key}: set_name is one of {', '.join(SETS)}")
        if self.environment not in ENVIRONMENTS:
            raise ValueError(f"stage {self.key}: environment is one of {', '.join(ENVIRONMENTS)}")
        if not 1 <= self.app_hosts <= len(APP_ROLES):
            raise ValueError(f"stage {self.key}: app_hosts must be 1-{len(APP_ROLES)}")
        if self.app_hosts > 1 and not self.front:
            raise ValueError(f"stage {self.key}: several app hosts need a proxy in front")
        if not 1 <= self.client_hosts <= len(CLIENT_ROLES):
            raise ValueError(f"stage {self.key}: client_hosts must be 1-{len(CLIENT_ROLES)}")
        if self.socketio_transport not in ("websocket", "polling"):
            raise ValueError(f"stage {self.key}: socketio_transport is websocket or polling")
        if self.socketio_server and not self.front:
            raise ValueError(f"stage {self.key}: a Socket.IO server of its own needs a proxy "
                             "in front to route /socket.io/ to it")

    @property
    def worker_connections(self) -> int:
        """Nginx's connections per worker process (5w: 32)."""
        return self.nginx.worker_connections

    def server_environment(self, server: str = "http") -> str:
        """The environment (ENVIRONMENTS) that server `server` (`commands`: `http`,
        `socketio`) starts from: the stage's own for its app server; for a Socket.IO
        server of its own, the one whose gunicorn has its worker class (9e's eventlet
        from .venv-eventlet, beside granian from .venv)."""
        if server == "socketio":
            return command_environment(self.socketio_server)
        return self.environment

    @property
    def environments(self) -> tuple[str, ...]:
        """Every environment its servers start from, its app server's first."""
        servers = ("http", "socketio") if self.socketio_server else ("http",)
        return tuple(dict.fromkeys(self.server_environment(s) for s in servers))

    @property
    def failure(self) -> bool:
        """A failure twin (lab 11): it runs only beside its base stage."""
        return self.set_name == "failures"

    @property
    def dirname(self) -> str:
        """Folder name of this stage inside a results run: `03-eventlet-keepalive`."""
        number, twin = re.match(r"(\d+)(\w*)$", self.key).groups()
        return f"{int(number):02d}{twin}-{self.slug}"

    def server_command(self, app_host: str = ADDRESS["app"],
                       app_port: int = APP_PORT) -> list[str]:
        return [part.format(app_host=app_host, app_port=app_port) for part in self.server]

    def commands(self, app_host: str = ADDRESS["app"], app_port: int = APP_PORT,
                 socketio_port: int = SOCKETIO_PORT) -> dict[str, list[str]]:
        """The servers of one app host, by what they serve: `http` (and Socket.IO
        where the stage has no Socket.IO server of its own), `socketio`."""
        found = {"http": self.server_command(app_host, app_port)}
        if self.socketio_server:
            found["socketio"] = [part.format(app_host=app_host, app_port=socketio_port)
                                 for part in self.socketio_server]
        return found

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
        """The gunicorn config file a server command names (`-c gunicorn/sync.conf.py`),
        relative to the repository root: the HTTP server's, or the Socket.IO server's
        when only that is gunicorn (stage 9); None where no server is gunicorn."""
        for server in (self.server, self.socketio_server or ()):
            if "gunicorn" in server and "-c" in server:
                return server[list(server).index("-c") + 1]
        return None

    @property
    def app_roles(self) -> tuple[str, ...]:
        """The app hosts: `("app",)`, or `("app", "app2")` in a stage that scales out."""
        return APP_ROLES[:self.app_hosts]

    @property
    def traced(self) -> bool:
        """Its app exports traces (FLASK_TRACING): the stage has a span sink."""
        return self.env.get("FLASK_TRACING") == "1"

    @property
    def roles(self) -> tuple[str, ...]:
        """The hosts this stage needs: the proxy only when it has a front, `app2` only
        when it has two app hosts, `client2` only when it needs two load hosts, the
        metrics host only when it traces (its span sink; --metrics adds it to any)."""
        unused = {"proxy"} if not self.front else set()
        unused |= set() if self.traced else {METRICS_ROLE}
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
            socketio = {"upstream_socketio": ("proxy", apps, SOCKETIO_PORT)}
            return {"redis": (apps, "redis", REDIS_PORT),
                    "upstream": ("proxy", apps, APP_PORT),
                    **(socketio if self.socketio_server else {}),
                    "front": ("client", "proxy", FRONT_PORT)}
        return {"redis": (apps, "redis", REDIS_PORT), "front": ("client", apps, APP_PORT)}

    def connection_classes(self, redis_port: int = REDIS_PORT, app_port: int = APP_PORT,
                           front_port: int = FRONT_PORT,
                           socketio_port: int = SOCKETIO_PORT) -> dict[str, int]:
        """The sampler's connection classes: name -> the port that marks them."""
        socketio = {"upstream_socketio": socketio_port} if self.socketio_server else {}
        if self.front:
            return {"redis": redis_port, "upstream": app_port, **socketio,
                    "front": front_port}
        return {"redis": redis_port, "front": app_port}


# Stage 9; its twins in the realtime set are copies of it with another Socket.IO server.
RUST_HTTP_SERVER = Stage(
    key="9", slug="rust-http-server", title="the HTTP API on a Rust server",
    server=GRANIAN_TODAY, socketio_server=GUNICORN_TODAY, redis_mode="pool",
    front="conf.d/socketio-split.conf", sysctl=("tuned", "narrow-ports"),
    users=ASYNC_USERS, env=SPLIT, set_name="today", nginx=WEBSOCKET_FRONT,
    checks=(UPSTREAM_REUSED, UPSTREAM_SOCKETIO_REUSED, DELIVERED_OVER_HTTP, NO_FAILURES,
            SOCKETIO_SERVED),
    see="stage 8's code with every HTTP route on granian and Socket.IO on stage 8's gevent "
        "worker, Nginx splitting by location: a message posted over HTTP still reaches the "
        "room's websocket listeners, through Redis")
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
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front=None, sysctl=("baseline",),
          users=ASYNC_USERS, checks=(REDIS_REUSED, FRONT_REUSED, FRONT_KEEPALIVE),
          see="`Connection: keep-alive`; client-side churn gone"),
    Stage(key="3g", slug="gevent-keepalive", title="gevent workers with keep-alive",
          server=GUNICORN_GEVENT, redis_mode="pool", front=None, sysctl=("baseline",),
          users=ASYNC_USERS, checks=(REDIS_REUSED, FRONT_REUSED, FRONT_KEEPALIVE),
          see="the same as stage 3, on gevent", twin_of="3",
          set_name="gevent"),
    Stage(key="3t", slug="gthread-keepalive", title="gthread workers with keep-alive (threads)",
          server=GUNICORN_GTHREAD, redis_mode="pool", front=None, sysctl=("baseline",),
          users=ASYNC_USERS, env=THREADING,
          checks=(REDIS_REUSED, FRONT_REUSED, FRONT_KEEPALIVE, WEBSOCKETS_SERVED),
          see="the same as stage 3 on threads, no green library: a websocket holds a thread",
          twin_of="3", set_name="today"),
    Stage(key="4", slug="nginx-proxy", title="Nginx in front, no upstream keep-alive",
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front="conf.d/proxy.conf",
          sysctl=("baseline", "narrow-ports"),
          users=ASYNC_USERS, checks=(PORTS_EXHAUSTED, EADDRNOTAVAIL, FAILED),
          see="TIME_WAIT between Nginx and the app; local ports run out, "
              "`(99: Cannot assign requested address)`, 502s"),
    Stage(key="4g", slug="nginx-proxy-gevent",
          title="Nginx in front, no upstream keep-alive (gevent)",
          server=GUNICORN_GEVENT, redis_mode="pool", front="conf.d/proxy.conf",
          sysctl=("baseline", "narrow-ports"),
          users=ASYNC_USERS, checks=(PORTS_EXHAUSTED, EADDRNOTAVAIL, FAILED),
          see="the same as stage 4, on gevent", twin_of="4",
          set_name="gevent"),
    Stage(key="5", slug="upstream-keepalive", title="Nginx upstream keep-alive + tcp_tw_reuse",
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, checks=(UPSTREAM_REUSED, NO_EADDRNOTAVAIL, NO_FAILURES),
          see="errors gone, Nginx-to-app TIME_WAIT ~0"),
    Stage(key="5g", slug="upstream-keepalive-gevent",
          title="Nginx upstream keep-alive + tcp_tw_reuse (gevent)",
          server=GUNICORN_GEVENT, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, checks=(UPSTREAM_REUSED, NO_EADDRNOTAVAIL, NO_FAILURES),
          see="the same as stage 5, on gevent", twin_of="5",
          set_name="gevent"),
    Stage(key="6", slug="scale-out", title="two app hosts behind Nginx", set_name="scale-out",
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
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
          see="the same as stage 6, on gevent", twin_of="6",
          set_name="scale-out"),
    Stage(key="6p", slug="scale-out-polling", title="two app hosts, polling clients, round robin",
          server=GUNICORN_EVENTLET_ONE, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2, env=POLLING,
          socketio_transport="polling",
          checks=(SPREAD_LOW, SPREAD_HIGH, POLLING_400S, POLLING_FAILS),
          see="Socket.IO over long-polling breaks: a session's polls land on both app hosts",
          twin_of="6", set_name="scale-out"),
    Stage(key="6i", slug="scale-out-ip-hash", title="two app hosts, polling clients, ip_hash",
          server=GUNICORN_EVENTLET_ONE, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, app_hosts=2, env=POLLING,
          socketio_transport="polling", balance="ip_hash",
          checks=(NO_400S, POLLING_WORKS, NO_FAILURES, PINNED),
          see="polling works again, and every client of the /24 is pinned to one app host",
          twin_of="6", set_name="scale-out"),
    Stage(key="6h", slug="scale-out-hash", title="two app hosts, polling clients, "
          "hash $remote_addr", server=GUNICORN_EVENTLET_ONE, environment=EVENTLET,
          redis_mode="pool",
          front="conf.d/upstream-keepalive.conf", sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, app_hosts=2, env=POLLING, socketio_transport="polling", client_hosts=2,
          balance="hash $remote_addr consistent",
          checks=(NO_400S, POLLING_WORKS, NO_FAILURES, TWO_KEYS),
          see="polling works; the two client hosts' addresses both hash to one app host",
          twin_of="6", set_name="scale-out"),
    Stage(key="7", slug="profile-then-fix", title="the code itself: one round trip per request",
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, env=CODE_ITSELF,
          checks=(TOKEN_CPU_DOWN, UPSTREAM_REUSED, NO_FAILURES),
          see="stage 5's stack, with the profile's hot spots gone from the app's code: "
              "less CPU per request, more requests per second"),
    Stage(key="8", slug="todays-stack", title="today's stack: stage 7's code on gunicorn 27",
          server=GUNICORN_TODAY, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, env=TODAY,
          checks=(TOKEN_CPU_DOWN, UPSTREAM_REUSED, NO_FAILURES),
          see="stage 7's code, served by the worker and settings measured best on gunicorn 27: "
              "one change class a step, 7 vs 5 the code, 8 vs 7 the server"),
    RUST_HTTP_SERVER,
    # the realtime set (lab 16): 9's Socket.IO server changed; 10 set to hold users, 10t, 10l
    *(replace(RUST_HTTP_SERVER, key=key, slug=slug, twin_of=base, set_name="realtime",
              title=title, socketio_server=server, env={**SPLIT, **env}, see=see)
      for key, slug, base, title, server, env, see in (
          ("9e", "socketio-eventlet", "9", "stage 9, Socket.IO on eventlet",
           GUNICORN_EVENTLET_REALTIME, {}, "the same as stage 9, its websockets held by "
           "gunicorn 25.3's eventlet worker (green threads), from .venv-eventlet"),
          ("9t", "socketio-threads", "9", "stage 9, Socket.IO on threads",
           GUNICORN_GTHREAD_REALTIME, THREADING, "the same as stage 9 on gunicorn's gthread "
           "worker, no green library: each websocket holds a thread"),
          ("9a", "socketio-asyncio", "9", "stage 9, Socket.IO on asyncio (ASGI)", GRANIAN_ASGI,
           {}, "the same as stage 9, its websockets held by python-socketio's AsyncServer on "
           "granian's ASGI interface: one event loop"),
          ("10", "realtime-tuned", "9", "stage 9's Socket.IO server tuned to hold users",
           GUNICORN_REALTIME, {}, "the same as stage 9 on gunicorn/realtime.conf.py: the "
           "collector frozen, gevent's greenlet tree off, one greenlet a user; one core holds "
           "more users"),
          ("10t", "realtime-tree-on", "10", "stage 10, gevent's greenlet tree on",
           GUNICORN_REALTIME, GREENLET_TREE, "stage 10 with gevent's greenlet tree tracked "
           "again, as in stage 9: what that one setting costs a user"),
          ("10l", "realtime-library-greenlets", "10", "stage 10, the libraries' four greenlets "
           "a user", GUNICORN_REALTIME, LIBRARY_GREENLETS, "stage 10 with the libraries' reader, "
           "ping and writer greenlets back, as in stage 9: what they cost a user"))),
    # the watched set (`--stages watched`, lab 17): stage 9, an instrument on
    *(replace(RUST_HTTP_SERVER, key=key, slug=slug, twin_of="9", set_name="watched",
              title=f"stage 9, {what}", env={**SPLIT, **env},
              checks=(*RUST_HTTP_SERVER.checks, *more),
              see=f"the same as stage 9 with {what}: what it costs a request")
      for key, slug, what, env, more in (
          ("9p", "with-metrics", "its Prometheus metrics", METRICS_ON, ()),
          ("9o", "with-traces", "every request traced", TRACED, (SPANS_NONE_LOST,)),
          ("9o10", "with-traces-10", "a tenth of the requests traced", TRACED_10, ()))),
    # the failures set (`--stages failures`, lab 11): each beside its base stage
    Stage(key="0t", slug="time-wait-cap", title="Flask's built-in server, TIME_WAIT capped",
          server=BUILTIN, redis_mode="per-request", front=None, sysctl=("baseline", "tw-cap"),
          users=HTTP_USERS, checks=(TW_CAPPED, TW_OVERFLOWED, NO_FAILURES),
          see="TIME_WAIT plateaus at 4,096; the kernel counts the rest as overflow",
          twin_of="0", set_name="failures"),
    Stage(key="2b", slug="small-backlog", title="gunicorn sync workers, an accept queue of 16",
          server=GUNICORN_SYNC_BACKLOG, redis_mode="pool", front=None,
          sysctl=("baseline", "small-backlog"), users=HTTP_USERS,
          checks=(LISTEN_OVERFLOWED, SYN_RETRIED),
          see="the accept queue overflows: ListenOverflows counts, p99 jumps by 1 s",
          twin_of="2", set_name="failures"),
    Stage(key="5w", slug="worker-connections",
          title="Nginx upstream keep-alive, 32 worker_connections",
          server=GUNICORN_EVENTLET, environment=EVENTLET,
          redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS,
          nginx=NginxSize(worker_connections=32),
          checks=(NOT_ENOUGH, CUT_OFF),
          see="Nginx runs out of connections by its own configuration, with CPU to spare: "
              "it closes keep-alive connections, requests fail, TIME_WAIT is back",
          twin_of="5", set_name="failures"),
    Stage(key="5k", slug="keepalive-race",
          title="Nginx upstream keep-alive, the app's keep-alive shorter than Nginx's",
          server=GUNICORN_EVENTLET_SHORT, environment=EVENTLET, redis_mode="pool",
          front="conf.d/upstream-keepalive.conf", sysctl=("tuned", "narrow-ports"),
          users=ASYNC_USERS, burst_every=1.05, checks=(RACED, POST_502),
          see="users that pause leave Nginx's connections idle until gunicorn closes them, "
              "sometimes under a request: POSTs answered 502",
          twin_of="5", set_name="failures"),
    Stage(key="8k", slug="worker-killed", title="stage 8, its worker killed under load",
          server=GUNICORN_TODAY, redis_mode="pool", front="conf.d/upstream-keepalive.conf",
          sysctl=("tuned", "narrow-ports"), users=ASYNC_USERS, env=TODAY, checks=RECOVERED,
          twin_of="8", set_name="failures", see="gunicorn's master starts a new worker; none lost"),
    Stage(key="9k", slug="workers-killed", title="stage 9, a worker of each server killed",
          server=GRANIAN_TODAY, socketio_server=GUNICORN_TODAY, redis_mode="pool", env=SPLIT,
          front="conf.d/socketio-split.conf", sysctl=("tuned", "narrow-ports"), twin_of="9",
          nginx=WEBSOCKET_FRONT,
          users=ASYNC_USERS, checks=RECOVERED, set_name="failures", see="each server replaces it"),
)
MAIN = tuple(s for s in STAGES if s.set_name == "main")  # `main`: what `make lab` runs
FAILURES = tuple(s for s in STAGES if s.failure)  # `failures`, with their base stages

BY_KEY = {s.key: s for s in STAGES}
BY_SLUG = {s.slug: s for s in STAGES}


def locustfile(user_classes) -> str:
    """The locustfile that holds these user classes."""
    if "ArrivalUser" in user_classes or "PacedUser" in user_classes:
        return ARRIVALS_LOCUSTFILE
    return KV_LOCUSTFILE if "KeyValueUser" in user_classes else LOCUSTFILE


def get(name: str) -> Stage:
    """A stage by key (`3`, `3g`) or slug (`eventlet-keepalive`)."""
    stage = BY_KEY.get(name) or BY_SLUG.get(name)
    if stage is None:
        known = ", ".join(f"{s.key} ({s.slug})" for s in STAGES)
        raise KeyError(f"unknown stage {name!r}; known stages: {known}")
    return stage


def in_set(name: str) -> set[str]:
    """The keys of set `name` (SETS, or `everything`): its stages and, for a set of
    twins, the base stages they are measured against."""
    if name == EVERYTHING:
        return {s.key for s in STAGES}
    own = [s for s in STAGES if s.set_name == name]
    return {s.key for s in own} | {s.twin_of for s in own if s.twin_of}


def select(spec: str) -> list[Stage]:
    """Sets (`main`, `gevent`, `scale-out`, `failures`, `today`, `realtime`, `everything`)
    and keys or slugs, comma/space separated, in registry order. A failure twin runs beside its
    base stage, under the same load: naming one without its base is an error."""
    parts = spec.replace(",", " ").split()
    names = f"{', '.join(SETS)}, {EVERYTHING}"
    if not parts:
        raise KeyError(f"no stage named: give a set ({names}) or keys such as 0,2")
    wanted: set[str] = set()
    for part in parts:
        if part == "all":
            raise KeyError(f"`all` is gone: `main` is the main line (make lab's default), "
                           f"`{EVERYTHING}` every stage; the sets: {names}")
        wanted |= in_set(part) if part in SETS or part == EVERYTHING else {get(part).key}
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


def client_sysctls() -> dict[str, str]:
    """The client host's sysctls (CLIENT_SYSCTL)."""
    return merged_profiles(CLIENT_SYSCTL)


def stage_sysctls(stage: Stage) -> dict[str, str]:
    """The stage's sysctls: its profiles merged in order (later wins)."""
    return merged_profiles(stage.sysctl)
