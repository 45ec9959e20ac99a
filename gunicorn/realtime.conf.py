# Stage 10 (realtime-tuned, lab 16): stage 9's Socket.IO server set to hold
# thousands of chat users on one core, the config to copy for a websocket server.
#
# What the measurements picked (lab 16, python -m benchmarks.studies.capacity):
# stage 9's gevent worker on gunicorn 27, with the collector kept off the users
# it holds and gevent's per-greenlet bookkeeping off. The rest is stage 9's
# (gunicorn/today.conf.py), spelled out here so that this file stands alone,
# less its hooks for HTTP responses and metrics: this server holds websockets.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/realtime.conf.py -b HOST:PORT app.wsgi:app
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

import os
import resource

# `-k gevent`: each websocket a greenlet, as in stage 9 (lab 16 compares it
# with eventlet, threads and asyncio).
worker_class = "gevent"
# One process: a websocket server on one core holds every user in one heap.
# More processes on the same core each pause for a smaller heap but cost a
# third more CPU a delivery (lab 16's fan-out); add processes with cores.
workers = 1
# The connections a worker holds at once: past it the worker stops accepting,
# with no line in any log (gunicorn's default is 1,000). Above the 10,000
# users this stage is sized for; the descriptor limit below comes first.
worker_connections = 20000
# As stage 9: longer than Nginx's 5 s, so Nginx closes an idle upstream
# connection.
keepalive = 10
# gunicorn's default, spelled out: the master kills a worker silent for 30 s.
timeout = 30
# gunicorn's default, spelled out: 30 s to finish on SIGTERM.
graceful_timeout = 30
# gunicorn's default, spelled out: no recycling. A restart would drop every
# websocket the worker holds.
max_requests = 0

# A websocket is a descriptor: the soft limit (`ulimit -Sn`, often 1,024) up
# to the hard one, which any process may do; past the hard one only root
# goes (lab 07). The lab raises its own before it starts the server; this
# does it where the file is copied to a box that does not.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))

def _given(name: str, default: str) -> str:
    """The environment's value where it gives one (the lab's twins 10t and 10l turn one
    setting back as stage 9 has it), else this file's."""
    return os.environ.get(name, default)


# The settings of the server's environment, each with its reason:
raw_env = [
    # Every object alive moves out of the collector's reach when the app has
    # loaded and then every 5 s (app/gc_policy.py): a collection scans what the
    # last seconds made, not every user held. Stage 9 paused 400-700 ms in full
    # collections at 2,500-5,000 users (lab 16).
    f"FLASK_GC_FREEZE_EVERY={_given('FLASK_GC_FREEZE_EVERY', '5')}",
    # gevent records, for every greenlet it spawns, the stack that spawned it (ten
    # frame records) and its parent: a debugging aid. Flask-SocketIO spawns a
    # greenlet for every event it handles and several for every websocket, so it
    # costs objects the collector walks and memory a user. Off, as gevent's
    # documentation offers (gevent.config.track_greenlet_tree).
    f"GEVENT_TRACK_GREENLET_TREE={_given('GEVENT_TRACK_GREENLET_TREE', 'false')}",
    # A connected user held four greenlets, each waiting with a copy of its stack and
    # its own Python frames, three of them only for the libraries' design:
    # simple-websocket's reader, which receives for the connection's handler; Engine.IO's
    # ping, a greenlet that sleeps 25 s; and Engine.IO's writer, which waits on a queue
    # for what to write. Here the handler reads its websocket itself
    # (app/realtime/inline_websocket.py), the ping is a timer of gevent's loop
    # (app/realtime/ping_timer.py), and a packet is written by whoever sends it
    # (app/realtime/direct_writer.py), to a websocket whose writes never wait (a slow client's
    # backlog gets a greenlet while it lasts): one greenlet a user. PSS a user at 5,000 users: 38.4
    # KiB, against 66.9 with the libraries' four (stage 10l; `python -m benchmarks.studies.capacity
    # --stages 10,10t,10l --users 5000 --seconds 30 --repeats 3`, lab 16), with no more CPU a
    # delivery that the study could tell.
    f"FLASK_WEBSOCKET_READER={_given('FLASK_WEBSOCKET_READER', 'handler')}",
    f"FLASK_ENGINEIO_PING={_given('FLASK_ENGINEIO_PING', 'timer')}",
    f"FLASK_ENGINEIO_WRITER={_given('FLASK_ENGINEIO_WRITER', 'direct')}",
]

# gunicorn 25 and later open a control socket for gunicornc at one path for
# every gunicorn of the box (two labs would take it from each other); unused.
control_socket_disable = True
