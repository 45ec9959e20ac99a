"""Attempt limits on log-in and sign-up, with Flask-Limiter counting in the app's Redis.

Failed logins are counted per account (the email asked for) and per client
address; successful ones never count, so a lab that logs hundreds of seeded
users in from one address within seconds never meets a limit. Sign-ups are
counted per address. The limits are settings (``LOGIN_FAILURES_PER_ACCOUNT``,
``LOGIN_FAILURES_PER_ADDRESS``, ``REGISTER_LIMIT_PER_ADDRESS``); a request
over one gets 429 ``{error, message}`` with a ``Retry-After`` header.

Behind a proxy every client has the proxy's address: the per-address limits
then count everybody together (the lab's Nginx stages stay far below them).
"""

from __future__ import annotations

from flask import Flask, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

from .validation import normalize_email


def account(*_args) -> str:
    """The account a login is for: its normalised email ("-" when there is none)."""
    try:
        data = request.get_json(force=True, silent=True)
    except RecursionError:  # nested too deeply; the view answers 400
        data = None
    email = data.get("email") if isinstance(data, dict) else None
    return (normalize_email(email) if isinstance(email, str) else None) or "-"


def failed(response) -> bool:
    return response.status_code == 401


def init_app(app: Flask) -> Limiter:
    """A limiter for this app (apps in one process may use different Redis servers)."""
    config = app.config
    limiter = Limiter(
        get_remote_address, app=app, storage_uri=config["REDIS_URL"],
        storage_options={"socket_connect_timeout": config["REDIS_CONNECT_TIMEOUT"],
                         "socket_timeout": config["REDIS_SOCKET_TIMEOUT"]},
        strategy="fixed-window", headers_enabled=True, key_prefix="limits")
    message = "too many attempts; try again later"
    login = app.view_functions["auth.login"]
    login = limiter.limit(config["LOGIN_FAILURES_PER_ACCOUNT"], key_func=account,
                          deduct_when=failed, error_message=message)(login)
    login = limiter.limit(config["LOGIN_FAILURES_PER_ADDRESS"], deduct_when=failed,
                          error_message=message)(login)
    app.view_functions["auth.login"] = login
    app.view_functions["auth.register"] = limiter.limit(
        config["REGISTER_LIMIT_PER_ADDRESS"], error_message=message)(
        app.view_functions["auth.register"])
    return limiter
