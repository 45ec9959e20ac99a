# Stage 8 (todays-stack): stage 7's code on today's gunicorn, the config to copy.
#
# What the measurements picked (lab 13): gevent workers on gunicorn 27, with
# gunicorn's C HTTP parser. Run it from the repository root, with the host's
# own address:
#   gunicorn -c gunicorn/today.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's.
# The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# `-k gevent`: each connection a greenlet, so a websocket costs a greenlet, not
# a thread (compare gunicorn/gthread.conf.py). The worker monkey-patches the
# standard library before the app is imported; the app states the matching
# Socket.IO mode (FLASK_SOCKETIO_ASYNC_MODE=gevent in the stage).
worker_class = "gevent"
# Four processes, as in stages 1-7, so that only the server changes from stage 7.
workers = 4
# gunicorn's C parser for requests (the gunicorn_h1c package; gunicorn[fast]):
# "fast" fails at start-up when it is missing, "auto" would fall back quietly.
http_parser = "fast"
# As the other keep-alive stages (the book's `--keep-alive 10`), longer than
# Nginx's 5 s, so that Nginx, not gunicorn, closes an idle upstream connection.
keepalive = 10
# gunicorn's default, spelled out: the master kills a worker silent for 30 s.
timeout = 30
# gunicorn's default, spelled out: on SIGTERM workers get 30 s to finish what
# they serve.
graceful_timeout = 30
