"""Reading and checking client input; every failure is a 4xx, never a 500."""

from __future__ import annotations

import math
import re
import unicodedata

from flask import abort, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

# Deliberately loose (one @, a dot in the domain, no spaces): the service
# never sends mail, it only needs a stable, sane login name.
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
EMAIL_MAX_LENGTH = 254
USERNAME_MAX_LENGTH = 64
PASSWORD_MAX_LENGTH = 256
# Line breaks and tabs are text in a message; every other control character
# (NUL, ESC, DEL, C1 controls, ...) is refused everywhere.
CONTENT_WHITESPACE = "\n\r\t"
# Idempotency-Key / clientId: printable ASCII, short (it becomes part of a Redis key).
MESSAGE_KEY_RE = re.compile(r"^[!-~]{1,128}$")


def refuse_constant(name: str):
    """NaN and Infinity are not JSON (RFC 8259); orjson refuses them, so stdlib does too."""
    raise ValueError(f"{name} is not JSON")


def finite_float(text: str) -> float:
    """A number too large for a double (1e999) is refused, as orjson refuses it."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is out of range")
    return value


def json_body() -> dict:
    """The request body as a JSON object: ``Content-Type: application/json`` (415
    otherwise), UTF-8 (400 otherwise, a byte-order mark too), a JSON object (400), not
    too large (413). One contract whichever JSON_PROVIDER decodes it: stdlib's json
    would guess UTF-16 from a BOM and take any Content-Type, orjson neither."""
    if request.mimetype != "application/json":
        abort(415, "a JSON body needs 'Content-Type: application/json'")
    charset = request.mimetype_params.get("charset", "utf-8").lower()
    if charset not in ("utf-8", "utf8"):
        abort(415, "a JSON body must be UTF-8")
    try:
        text = request.get_data(cache=True).decode("utf-8")
        if text.startswith("\ufeff"):
            raise ValueError("byte-order mark")
        data = current_app.json.loads(text, parse_constant=refuse_constant,
                                     parse_float=finite_float)
    except RequestEntityTooLarge:
        raise
    except RecursionError:  # "[[[[..." nested deeper than the parser's stack
        abort(400, "request body is nested too deeply")
    except ValueError:  # UnicodeDecodeError and both providers' JSON errors are ValueErrors
        abort(400, "request body must be valid JSON in UTF-8")
    if not isinstance(data, dict):
        abort(400, "request body must be a JSON object")
    return data


def refuse_oversize_chunked_body() -> None:
    """413 for a body without Content-Length (chunked) longer than MAX_CONTENT_LENGTH.

    With a Content-Length werkzeug refuses a large body before reading it; a
    chunked one it silently cuts off at the limit, which then fails as bad
    JSON (400). So read it here (cached for the view) and look for one more byte.
    """
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if request.content_length is not None or request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if len(request.get_data(cache=True)) >= limit and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge(f"request body is larger than {limit} bytes")


def init_app(app) -> None:
    app.before_request(refuse_oversize_chunked_body)


def has_control_chars(value: str, allowed: str = "") -> bool:
    return any(unicodedata.category(c) == "Cc" and c not in allowed for c in value)


def require_str(data: dict, name: str, max_length: int | None = None,
                allowed_controls: str | None = "") -> str:
    """A non-blank string field without control characters (but `allowed_controls`;
    None: any, for passwords, which are only hashed); too long is 400 unless the
    caller checks itself."""
    if name not in data or data[name] is None:
        abort(400, f"missing field '{name}'")
    value = data[name]
    if not isinstance(value, str):
        abort(400, f"'{name}' must be a string")
    if not value.strip():
        abort(400, f"'{name}' must not be empty")
    try:
        # JSON may carry lone surrogates ("\ud800") that cannot be stored.
        value.encode("utf-8")
    except UnicodeEncodeError:
        abort(400, f"'{name}' is not valid text")
    if allowed_controls is not None and has_control_chars(value, allowed_controls):
        abort(400, f"'{name}' must not contain control characters")
    if max_length is not None and len(value) > max_length:
        abort(400, f"'{name}' is longer than {max_length} characters")
    return value


# Ids come from Redis INCR: a signed 64-bit integer. A larger one (10**30, 2**64, which
# stdlib's json parses and orjson refuses) is bad input, not an unknown id.
MAX_ID = 2**63 - 1


def parse_id(value) -> int | None:
    """A positive integer id from an int or a string of digits, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value <= MAX_ID else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        number = int(value)
        return number if number > 0 else None
    return None


def require_id(data: dict, name: str) -> int:
    if name not in data or data[name] is None:
        abort(400, f"missing field '{name}'")
    number = parse_id(data[name])
    if number is None:
        abort(400, f"'{name}' must be a positive integer id")
    return number


def normalize_email(value: str) -> str | None:
    """Lower-cased, stripped email, or None when it does not look like one."""
    email = value.strip().lower()
    if len(email) > EMAIL_MAX_LENGTH or not EMAIL_RE.match(email):
        return None
    return email


def require_email(data: dict, name: str = "email") -> str:
    email = normalize_email(require_str(data, name))
    if email is None:
        abort(400, f"'{name}' is not a valid email address")
    return email


def require_password(data: dict) -> str:
    password = require_str(data, "password", max_length=PASSWORD_MAX_LENGTH,
                           allowed_controls=None)
    minimum = current_app.config["PASSWORD_MIN_LENGTH"]
    if len(password) < minimum:
        abort(400, f"'password' must have at least {minimum} characters")
    return password


def check_content(data) -> str:
    """Message content: a non-blank string; over MESSAGE_MAX_LENGTH is 413.

    413 (not 400) because the input is well-formed, only too large: the
    same answer as for an oversized request body.
    """
    if not isinstance(data, dict):
        abort(400, "payload must be a JSON object")
    content = require_str(data, "content", allowed_controls=CONTENT_WHITESPACE)
    maximum = current_app.config["MESSAGE_MAX_LENGTH"]
    if len(content) > maximum:
        abort(413, f"'content' is longer than {maximum} characters")
    return content


def parse_limit(default: int = 50, maximum: int = 200) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= maximum:
        abort(400, f"'limit' must be an integer from 1 to {maximum}")
    return int(raw)


def check_message_key(value, name: str) -> str | None:
    """An Idempotency-Key header or a clientId: None when absent, else 1-128
    printable ASCII characters (400 otherwise)."""
    if value is None:
        return None
    if not isinstance(value, str) or not MESSAGE_KEY_RE.match(value):
        abort(400, f"'{name}' must be 1 to 128 printable ASCII characters")
    return value
