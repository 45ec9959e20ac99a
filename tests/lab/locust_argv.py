"""Parse Locust command lines with Locust's own parser, in a process of their own.

tests/lab/test_docs.py runs this with a JSON list of argv on stdin (each
without the leading `locust`, all naming the same locustfiles) and reads a
JSON list back: "" for a command line Locust accepts, else why not. It is a
script, not a helper the tests import, because importing locust monkey-patches
the process with gevent. Nothing is started: the locustfiles are imported
(that is how their --chat-* options and user classes come to exist) and the
options are parsed, as `locust` does before it runs anything.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from locust import argument_parser  # isort: skip  (first: it monkey-patches the stdlib)
from locust.main import merge_locustfiles_content


def problem(argv: list[str], user_classes: dict) -> str:
    """Why Locust would refuse `locust ARGV` before it starts a user, or ""."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            options = argument_parser.get_parser().parse_args(argv)
    except SystemExit:
        text = err.getvalue()
        return text[text.find("error:"):].strip() if "error:" in text else text.strip()
    unknown = [name for name in options.user_classes if name not in user_classes]
    if unknown:
        return f"no user class {unknown} in {options.locustfile} ({sorted(user_classes)})"
    if options.num_users is not None and options.num_users < 1:
        return f"-u {options.num_users}: at least one user"
    if options.spawn_rate is not None and options.spawn_rate <= 0:
        return f"-r {options.spawn_rate}: users started per second must be > 0"
    return ""


def main() -> int:
    argvs = json.load(sys.stdin)
    sys.argv[0] = "locust"  # the name its errors give
    located = argument_parser.parse_locustfile_option(argvs[0])
    files = argument_parser.get_locustfiles_locally(located)
    try:  # a shape class reads its STEP_* variables when it is made
        user_classes, _shapes, _tasks, _shape = merge_locustfiles_content(files)
    except (Exception, SystemExit) as e:
        json.dump([f"loading {', '.join(files)}: {e!r}"] * len(argvs), sys.stdout)
        return 0
    json.dump([problem(argv, user_classes) for argv in argvs], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
