"""WSGI entry point: ``gunicorn app.wsgi:app``.

Gunicorn imports this in each worker after forking (no --preload), so with an
eventlet or gevent worker (``worker_class`` in gunicorn/eventlet.conf.py,
gunicorn/gevent.conf.py) the worker has already monkey-patched the standard
library and the app picks the matching Socket.IO async mode.
"""

from . import create_app

app = create_app()
socketio = app.extensions["socketio"]  # for scripts that want socketio.emit(...)
