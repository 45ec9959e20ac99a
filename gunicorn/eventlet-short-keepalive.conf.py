# gunicorn 25.3 only (.venv-eventlet): gunicorn 26 removed the eventlet worker.
# The failure twin 5k (keepalive-race, lab 11): stage 5's eventlet workers with
# a keep-alive SHORTER than Nginx's, the order the other way round.
#
# gunicorn closes a client connection that has been idle for `keepalive`
# seconds. Nginx keeps its idle connections to the app for its upstream
# `keepalive_timeout` (5 s, nginx/conf.d/upstream-keepalive.conf) and reuses
# them. With 1 s here, an idle connection in Nginx's pool is one gunicorn may
# be closing at the very moment Nginx sends a request on it: the request meets
# a reset (or a FIN), Nginx logs `recv() failed (104: Connection reset by
# peer) while reading response header from upstream` (or `upstream
# prematurely closed connection`), retries a GET on a new connection, and
# answers a POST 502 (Nginx never resends a non-idempotent request). The fix
# is stage 5's order: the app's keep-alive longer than the proxy's
# (gunicorn/eventlet.conf.py). Otherwise the same as that file.
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/eventlet-short-keepalive.conf.py -b HOST:PORT app.wsgi:app
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# Stage 5's eventlet workers (the book's `-k eventlet`), four of them.
worker_class = "eventlet"
# Four processes, as in stage 5, so that only the keep-alive differs.
workers = 4
# The mistake: shorter than Nginx's upstream keepalive_timeout (5 s). gunicorn
# takes whole seconds; 1 is its shortest keep-alive (0 turns it off).
keepalive = 1
# gunicorn's default, spelled out, as in stage 5: a worker silent for 30 s is killed.
timeout = 30
# gunicorn's default, spelled out, as in stage 5: 30 s to finish on SIGTERM.
graceful_timeout = 30

# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
