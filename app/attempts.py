"""Attempt limits: what a stranger can try, and how often, counted in the app's Redis.

Fixed windows from the ``limits`` library, one counter per idea (settings):

* ``FAILED_ATTEMPTS_PER_ADDRESS``: every answer that tells a client something
  it could enumerate with counts against its address: a failed login (401), a
  sign-up for an email that is registered (409), a friend request for an id
  that does not exist (404). Past the limit those three endpoints answer 429.
* ``LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS``: failed logins for one account
  from one address; the guesser slows down, nobody else does.
* ``LOGIN_FAILURES_PER_ACCOUNT``: failed logins for one account from every
  address, applied only to addresses that have failed for that account. The
  owner, from an address with no failures, always gets through: a stranger
  cannot lock them out, and a guesser with many addresses gets this many
  tries (plus one per fresh address) per window.
* ``REGISTER_LIMIT_PER_ADDRESS``: sign-ups per address.

Successful logins never count, so a lab that logs hundreds of seeded users in
from one address within seconds meets no limit. A refusal is 429 ``{error,
message}`` with ``Retry-After``. Behind a proxy every client has the proxy's
address: the per-address limits then count everybody together (the lab's Nginx
stages stay far below them).
"""

from __future__ import annotations

import time

from flask import Flask, current_app, request
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter
from werkzeug.exceptions import TooManyRequests

from .settings import ATTEMPT_LIMITS

MESSAGE = "too many attempts; try again later"


class Attempts:
    """The counters of one app (apps in one process may use different Redis servers)."""

    def __init__(self, config):
        storage = storage_from_string(
            config["REDIS_URL"], socket_connect_timeout=config["REDIS_CONNECT_TIMEOUT"],
            socket_timeout=config["REDIS_SOCKET_TIMEOUT"])
        self.window = FixedWindowRateLimiter(storage)
        self.items = {name: parse(config[name]) for name in ATTEMPT_LIMITS}

    def spent(self, name: str, *keys: str) -> bool:
        return not self.window.test(self.items[name], name, *keys)

    def used(self, name: str, *keys: str) -> bool:
        """Whether anything counted against this limit in the current window."""
        item = self.items[name]
        return self.window.get_window_stats(item, name, *keys).remaining < item.amount

    def hit(self, name: str, *keys: str) -> bool:
        """Count one; False when the limit was already spent."""
        return self.window.hit(self.items[name], name, *keys)

    def refuse(self, name: str, *keys: str):
        reset = self.window.get_window_stats(self.items[name], name, *keys).reset_time
        raise TooManyRequests(MESSAGE, retry_after=max(1, int(reset - time.time()) + 1))


def counters() -> Attempts:
    return current_app.extensions["attempts"]


def address() -> str:
    return request.remote_addr or "-"


def check_address() -> None:
    """429 when the caller's address has spent its failed attempts."""
    if counters().spent("FAILED_ATTEMPTS_PER_ADDRESS", address()):
        counters().refuse("FAILED_ATTEMPTS_PER_ADDRESS", address())


def failed() -> None:
    """Count an answer that told the caller something (401, 409, 404)."""
    counters().hit("FAILED_ATTEMPTS_PER_ADDRESS", address())


def check_login(email: str) -> None:
    """429 before a login is tried, when this address, or this account from an
    address that has failed for it, has no tries left."""
    c, addr = counters(), address()
    check_address()
    if c.spent("LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS", email, addr):
        c.refuse("LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS", email, addr)
    if c.used("LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS", email, addr) and \
            c.spent("LOGIN_FAILURES_PER_ACCOUNT", email):
        c.refuse("LOGIN_FAILURES_PER_ACCOUNT", email)


def login_failed(email: str) -> None:
    c, addr = counters(), address()
    failed()
    c.hit("LOGIN_FAILURES_PER_ACCOUNT_AND_ADDRESS", email, addr)
    c.hit("LOGIN_FAILURES_PER_ACCOUNT", email)


def check_register() -> None:
    """429 when this address has spent its sign-ups or its failed attempts; counts one."""
    check_address()
    if not counters().hit("REGISTER_LIMIT_PER_ADDRESS", address()):
        counters().refuse("REGISTER_LIMIT_PER_ADDRESS", address())


def init_app(app: Flask) -> Attempts:
    app.extensions["attempts"] = Attempts(app.config)
    return app.extensions["attempts"]
