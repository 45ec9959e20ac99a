# gunicorn 25.3 only (.venv-eventlet): gunicorn 26 removed the eventlet worker.
# Stage 9e (socketio-eventlet, the realtime set, lab 16): stage 9's Socket.IO
# server on ONE eventlet worker, beside granian's HTTP API, for the capacity
# study (how many websockets a worker holds, and what breaks first).
#
# An eventlet worker runs each connection in a green thread, which yields
# while it waits on the network: an open websocket costs a green thread and
# its buffers, not an OS thread (compare gunicorn/gthread-realtime.conf.py).
# Only /socket.io/ comes here (Nginx splits by location,
# nginx/conf.d/socketio-split.conf); a message posted over HTTP reaches these
# websockets through the app's Redis message queue.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/eventlet-realtime.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's.
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# The book's `-k eventlet`. The app picks the matching Socket.IO async mode
# itself (app/wsgi.py).
worker_class = "eventlet"
# One process, as stage 9's gevent server has on the lab's one server core:
# the study measures what one worker holds; more come from more workers (with
# websocket-only clients or sticky sessions) or more hosts.
workers = 1
# The connections a worker holds at once: past it the worker stops accepting
# and the next connections wait in the kernel's accept queue (then their SYNs
# are dropped), with no line in any log. gunicorn's default, 1,000, is far
# below the study's top step (~10,000 websockets on this one worker), so it is
# raised past it: the worker's file-descriptor limit (20,000 on the lab's
# box, one descriptor per websocket) then caps it first, and that one says so
# ("Too many open files" in the log). Raise `ulimit -n` with it on your own
# machine (sysctl/limits.conf, lab 07).
worker_connections = 20000
# As the other keep-alive stages (the book's `--keep-alive 10`), longer than
# Nginx's 5 s, so that Nginx, not gunicorn, closes an idle upstream connection
# (a long-polling client's; a websocket stays open for its whole session).
keepalive = 10
# gunicorn's default, spelled out. The master kills a worker it has not heard
# from for 30 s: an eventlet worker reports from its own green thread, so this
# catches a loop that is stuck, not a websocket held for an hour.
timeout = 30
# gunicorn's default, spelled out: on SIGTERM workers get 30 s to finish what
# they serve.
graceful_timeout = 30

# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
