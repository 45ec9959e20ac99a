# Stage 9t (socketio-threads, the realtime set, lab 16): stage 9's Socket.IO
# server on ONE gunicorn gthread worker, Flask-SocketIO's threading mode
# (websockets through simple-websocket), beside granian's HTTP API, for the
# capacity study. gunicorn 27 (.venv).
#
# No library patches the standard library here: every open websocket holds
# one of the worker's `threads` for its whole life (its request never ends),
# and simple-websocket starts one more thread beside it that reads the socket.
# So `threads` is the number of users a worker can hold, and it caps them
# silently: gunicorn still accepts the next connection and queues it for a
# thread, and its handshake waits there, unanswered, until a websocket closes.
# Size it for the websockets a worker must hold, plus the requests that come
# and go beside them (compare stage 3t's gunicorn/gthread.conf.py, lab 13).
#
# Run it from the repository root, with the host's own address (gunicorn 27):
#   gunicorn -c gunicorn/gthread-realtime.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's.
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# `-k gthread`. The stage states the matching Socket.IO mode
# (FLASK_SOCKETIO_ASYNC_MODE=threading, app/realtime/server.py).
worker_class = "gthread"
# One process, as stage 9's gevent server has on the lab's one server core:
# the study measures what one worker holds.
workers = 1
# Threads of the one process: the capacity study's top step, 10,000 websockets
# on this worker, and 500 more for what comes and goes beside them (handshakes
# in flight, /healthz). The pool starts its threads as requests need them, so
# an idle worker costs none; each costs its stack and the interpreter's
# per-thread state, twice per websocket (with simple-websocket's reader): the
# memory per user that the study measures. Past 10,500 websockets the next
# user waits for a thread, as said above.
threads = 10500
# Connections a process holds at once, busy or idle: past it gunicorn stops
# accepting and the next wait in the kernel's accept queue, silently.
# gunicorn's default, 1,000, would cap the websockets long before the threads
# do; above `threads` (gunicorn warns when it is not), so that the threads
# are the limit. The worker's file-descriptor limit (20,000 on the lab's box,
# one per websocket) is the next one, and says so ("Too many open files").
worker_connections = 20000
# As the other keep-alive stages (the book's `--keep-alive 10`), longer than
# Nginx's 5 s, so that Nginx, not gunicorn, closes an idle upstream connection.
keepalive = 10
# gunicorn's default, spelled out: the master kills a worker silent for 30 s.
timeout = 30
# gunicorn's default, spelled out: on SIGTERM workers get 30 s to finish what
# they serve.
graceful_timeout = 30

# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
