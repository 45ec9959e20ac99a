# gunicorn 25.3 only (.venv-eventlet): gunicorn 26 removed the eventlet worker.
# Stage 3 (eventlet-keepalive), and the app servers of stages 4, 5 and 6:
# gunicorn with eventlet workers that keep client connections open.
#
# An eventlet worker runs each connection in a green thread that yields while
# it waits for the network, so one process holds many idle keep-alive
# connections and WebSockets at once, and the server answers
# `Connection: keep-alive` (lab 04). gunicorn 26 removed this worker and
# eventlet is deprecated: it runs from .venv-eventlet on gunicorn 25.3, and
# gunicorn/gevent.conf.py is the same stage on gevent, the one to copy for a
# new service.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/eventlet.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's
# (and gunicorn's command line wins over this file, so a `bind` here would be
# replaced anyway). The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# The book's `-k eventlet`. The app picks the matching Socket.IO async mode
# itself (app/wsgi.py).
worker_class = "eventlet"
# Four processes, as in stages 1 and 2, so that only the worker type changes
# between them.
workers = 4
# The book's `--keep-alive 10`: an idle client connection stays open 10 s
# after a response, so a client that sends its next request within that time
# reuses it (no TIME_WAIT per request). Longer than the 5 s after which Nginx
# drops its idle upstream connections (nginx/conf.d/upstream-keepalive.conf),
# so that Nginx, not gunicorn, closes them and never reuses one gunicorn is
# just closing.
keepalive = 10
# gunicorn's default, spelled out. The master kills a worker it has not heard
# from for 30 s. An eventlet worker reports from its own green thread, so this
# catches a worker whose loop is stuck (CPU-bound code, a blocking call that
# was not monkey-patched), not a long request or a WebSocket held for an hour.
timeout = 30
# gunicorn's default, spelled out. On SIGTERM (how the lab, and systemd, stop
# it) or a restart, workers get 30 s to finish the requests they are serving
# before they are killed.
graceful_timeout = 30

# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
