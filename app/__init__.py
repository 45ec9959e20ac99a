"""The chat service: a Redis-backed Flask app with a Socket.IO layer.

``create_app()`` builds it; ``app.wsgi:app`` is the WSGI entry for gunicorn
and ``flask --app app ...`` finds the factory here. Settings: see settings.py.
"""

from __future__ import annotations

from flask import Flask

from . import (
    attempts,
    auth,
    errors,
    fast_path,
    gc_policy,
    health,
    redis_store,
    rooms,
    seed,
    settings,
    users,
    validation,
)
from .realtime import server as realtime_server
from .watchers import access_log, gc_census, gc_log, metrics, tracing


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app: defaults, then FLASK_* environment, then `test_config`."""
    app = Flask(__name__)
    app.config.from_mapping(settings.DEFAULTS)
    app.config.from_prefixed_env()  # FLASK_REDIS_URL -> REDIS_URL, ...
    if test_config:
        app.config.from_mapping(test_config)
    settings.validate(app.config, app.logger)
    fast_path.init_json(app)
    gc_log.init_app(app)
    gc_policy.init_app(app)

    access_log.init_app(app)  # first: its clock starts before the other hooks
    metrics.init_app(app)  # next, for the same reason (a 413 from validation is counted)
    errors.init_app(app)
    validation.init_app(app)
    redis_store.init_app(app)
    for blueprint in (auth.bp, users.bp, rooms.bp, health.bp):
        app.register_blueprint(blueprint)
    attempts.init_app(app)
    seed.init_app(app)
    tracing.init_app(app)  # wraps Flask's wsgi_app: before the Socket.IO layer takes it
    flask_wsgi_app = app.wsgi_app
    realtime_server.init_app(app)
    gc_census.init_app(app)  # after realtime: it serves gevent mode alone
    fast_path.init_app(app, flask_wsgi_app)
    return app
