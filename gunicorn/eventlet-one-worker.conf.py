# gunicorn 25.3 only (.venv-eventlet): gunicorn 26 removed the eventlet worker.
# Stages 6p and 6i (Socket.IO on long-polling, two app hosts): gunicorn with
# ONE eventlet worker per host.
#
# A long-polling Socket.IO session is a series of HTTP requests, and the
# session lives in the one process that opened it. gunicorn hands each
# request to whichever of its workers takes it, so with several workers a
# session's next poll may land on another process, which answers 400
# ("Session ID unknown"). With one worker per host, a session survives as long
# as its polls reach the right host; across hosts that is Nginx's job
# (stickiness: `ip_hash`, `hash $remote_addr consistent`; lab 10, and
# Flask-SocketIO's deployment notes). More capacity comes from more hosts, not
# more workers. Otherwise the same as gunicorn/eventlet.conf.py.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/eventlet-one-worker.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's
# (and gunicorn's command line wins over this file, so a `bind` here would be
# replaced anyway). The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# The book's `-k eventlet`, as in stage 6. The app picks the matching
# Socket.IO async mode itself (app/wsgi.py).
worker_class = "eventlet"
# One process per host: a polling session must come back to the process that
# holds it (see above).
workers = 1
# The book's `--keep-alive 10`: an idle client connection stays open 10 s
# after a response. Longer than the 5 s after which Nginx drops its idle
# upstream connections (nginx/conf.d/upstream-keepalive.conf), so that Nginx,
# not gunicorn, closes them.
keepalive = 10
# gunicorn's default, spelled out. The master kills a worker it has not heard
# from for 30 s. An eventlet worker reports from its own green thread, so this
# catches a worker whose loop is stuck, not a long poll or a WebSocket held
# for an hour.
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
