# The failure twin 2b (small-backlog, lab 11): stage 2's sync workers with an
# accept queue of 16 (sysctl/67-small-backlog.conf sets somaxconn to 16 too).
#
# A sync worker is a process that serves one request at a time. It cannot wait
# cheaply for a client's next request, so it answers every request with
# `Connection: close` and closes the connection itself: one TIME_WAIT on the
# server's port per request (stage 1's lesson; lab 02).
#
# Run it from the repository root, with the host's own address:
#   gunicorn -c gunicorn/sync-backlog-16.conf.py -b HOST:PORT app.wsgi:app
# The address stays on the command line: it is the host's, not the stage's
# (and gunicorn's command line wins over this file, so a `bind` here would be
# replaced anyway). The lab also passes its access log in GUNICORN_CMD_ARGS
# (benchmarks/run/runner.py), which gunicorn reads after this file.

# gunicorn's default worker, spelled out: one request at a time per process.
worker_class = "sync"
# Four processes, the book's `-w 4`. gunicorn's docs suggest 2-4 per core; on
# the lab's one server core, four sync workers are no faster than the built-in
# server (lab 02), and lab 08 measures 1 against 4.
workers = 4
# gunicorn's default. A sync worker ignores it: it never keeps a connection
# open after the response (see above), whatever this says.
keepalive = 2
# gunicorn's default, spelled out. The master kills a worker it has not heard
# from for 30 s; a sync worker cannot report while it handles a request, so a
# request that takes longer than this, or a client that sends its request
# slower (a slowloris), is cut off ("WORKER TIMEOUT" in the log) and its
# worker restarted. Until then that one connection holds the whole worker.
timeout = 30
# gunicorn's default, spelled out. On SIGTERM (how the lab, and systemd, stop
# it) or a restart, workers get 30 s to finish the requests they are serving
# before they are killed.
graceful_timeout = 30
# The listen backlog: how many connections the kernel queues for the workers to
# accept (gunicorn's default is 2048, cut to net.core.somaxconn). Sync workers
# accept one connection each at a time, so with 50 users and 4 workers up to 46
# wait here; past 16 the kernel drops the SYN, and the client retries it 1 s later.
backlog = 16

# gunicorn 25 and later open a control socket for gunicornc, by default at
# $HOME/.gunicorn/gunicorn.ctl: one path for every gunicorn of the box, so two labs
# (or the suite beside a lab) would take it from each other, and the file stays behind.
# The lab never uses it.
control_socket_disable = True
