# Stage 3t (gthread-keepalive): gunicorn's threaded worker with keep-alive, the
# mode Flask-SocketIO's introduction points to first (its threading mode,
# websockets through simple-websocket; its deployment page still lists eventlet
# first, threads as "a third option"), and what most Flask services run.
#
# A gthread worker serves each request in a thread of a fixed pool and parks an
# idle keep-alive connection in its poller, where it holds no thread. A
# websocket is different: its request never ends, so it holds its thread for
# its whole life. The arithmetic (lab 13): workers x threads threads in all,
# minus one per open websocket, is what is left for HTTP requests; a websocket
# beyond that waits for a thread, and so do the HTTP requests behind it.
#
# Run it from the repository root, with the host's own address (gunicorn 27):
#   gunicorn -c gunicorn/gthread.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's.
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# `-k gthread`. No library patches the standard library, so the app picks
# Flask-SocketIO's threading mode (app/realtime/server.py); FLASK_SOCKETIO_ASYNC_MODE
# states it in the stage.
worker_class = "gthread"
# Four processes, as in stages 1-3, so that only the worker type changes.
workers = 4
# Threads per process: 4 x 16 = 64 in all. The lab's load has 10 Socket.IO
# users (each a websocket that holds a thread for the whole run) and 50 HTTP
# users that each send one request at a time: 60 at once at most, so every one
# has a thread. With `threads = 2` (8 in all) the 10 websockets would take every
# thread and the HTTP requests would wait behind them: lab 13 shows the same
# with 80 websockets against these 64 threads.
threads = 16
# Connections a process holds at once, busy or idle (gunicorn's default,
# spelled out): idle keep-alive connections beyond `threads` wait in the
# poller, up to this many.
worker_connections = 1000
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
