# Stages 3g, 4g, 5g and 6g (the gevent twins): gunicorn with gevent workers
# that keep client connections open.
#
# The same as gunicorn/eventlet.conf.py on gevent, the worker that replaces
# eventlet (gunicorn 26 removed the eventlet worker): each connection runs in
# a greenlet that yields while it waits for the network, so one process holds
# many idle keep-alive connections and WebSockets at once (lab 04).
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/gevent.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's
# (and gunicorn's command line wins over this file, so a `bind` here would be
# replaced anyway). The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# `-k gevent`. The app picks the matching Socket.IO async mode itself
# (app/wsgi.py).
worker_class = "gevent"
# Four processes, as in stages 1 and 2, so that only the worker type changes
# between them.
workers = 4
# As the eventlet stages (the book's `--keep-alive 10`): an idle client
# connection stays open 10 s after a response, so a client that sends its
# next request within that time reuses it. Longer than the 5 s after which
# Nginx drops its idle upstream connections
# (nginx/conf.d/upstream-keepalive.conf), so that Nginx, not gunicorn, closes
# them and never reuses one gunicorn is just closing.
keepalive = 10
# gunicorn's default, spelled out. The master kills a worker it has not heard
# from for 30 s. A gevent worker reports from its own greenlet, so this
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
