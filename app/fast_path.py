"""Stage 7, "the code itself": the profile's hot costs in the app's own path, each behind
a setting that is off by default (settings.py), so every earlier stage keeps its code.

* FUSED_ROUND_TRIPS: the token check rides in each chat view's first round trip to
  Redis (tokens.py, ``login_required(in_view=True)``; a script or a pipeline per view).
* TOKEN_CACHE_SIZE: a token's signature is checked once per process (tokens.py).
* JSON_PROVIDER = "orjson": Flask's JSON encoding and decoding by orjson.
* COOKIE_SESSION = False: no signed-cookie session opened for each HTTP request.
* ENGINEIO_EVERY_PATH = False: Engine.IO's middleware only on /socket.io/.

Each one's gain, measured, is in exercises/12-profile-then-fix.md.
"""

from __future__ import annotations

from collections import OrderedDict

import orjson
from flask import Flask
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SecureCookieSessionInterface


class OrjsonProvider(DefaultJSONProvider):
    """Flask's JSON by orjson. Its options (indent, sort_keys) are not used by the API."""

    def dumps(self, obj, **kwargs) -> str:
        return orjson.dumps(obj).decode()

    def loads(self, s, **kwargs):
        return orjson.loads(s)  # a malformed body raises a ValueError: 400, as before


class NoCookieSession(SecureCookieSessionInterface):
    """No session for an HTTP request: the API is token-based. (A Socket.IO event's
    session is Flask-SocketIO's own, a dict per connection.)"""

    def open_session(self, app, request):
        return None  # Flask then makes a null session, which it never saves


class SocketIOPathOnly:
    """/socket.io/ to the Engine.IO stack (the guard, Flask-SocketIO's middleware); every
    other path straight to Flask."""

    def __init__(self, socketio_stack, flask_app, path: str = "/socket.io/"):
        self.socketio_stack, self.flask_app, self.path = socketio_stack, flask_app, path

    def __call__(self, environ, start_response):
        if (environ.get("PATH_INFO") or "").startswith(self.path):
            return self.socketio_stack(environ, start_response)
        return self.flask_app(environ, start_response)


def init_json(app: Flask) -> None:
    """Before anything encodes: the JSON provider."""
    if app.config["JSON_PROVIDER"] == "orjson":
        app.json = OrjsonProvider(app)


def init_app(app: Flask, flask_wsgi_app) -> None:
    """After the Socket.IO layer wrapped `flask_wsgi_app` (Flask's own wsgi_app)."""
    if app.config["TOKEN_CACHE_SIZE"]:
        app.extensions["token_cache"] = OrderedDict()
    if not app.config["COOKIE_SESSION"]:
        app.session_interface = NoCookieSession()
    if not app.config["ENGINEIO_EVERY_PATH"]:
        app.wsgi_app = SocketIOPathOnly(app.wsgi_app, flask_wsgi_app)
