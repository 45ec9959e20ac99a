"""Render the real Nginx configs in nginx/ for one stage, and check them with `nginx -t`.

The files use at-sign placeholders such as `@FRONT_PORT@` (Nginx's own syntax already uses
`$name`); `@APP_SERVERS@` becomes one upstream `server` line per app host.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

NGINX_HINT = ("Install it: `apt-get install nginx-light` (Debian/Ubuntu, as root), "
              "or run `make setup`.")


def render(template: str, run_dir: Path, apps: Sequence[tuple[str, int]],
           front: tuple[str, int], balance: str | None = None) -> Path:
    """Write nginx/<template> filled in for this run to run_dir/nginx.conf: the app
    hosts' (address, port) as the upstream's servers, after the upstream's `balance`
    method if any (`ip_hash`; none: round robin), and Nginx's own (address, port) to
    listen on."""
    if not apps:
        raise ValueError("an upstream needs at least one app server")
    lines = [f"{balance};"] if balance else []
    lines += [f"server {host}:{port};" for host, port in apps]
    text = re.sub(r"^( *)@APP_SERVERS@$", lambda m: "\n".join(m[1] + ln for ln in lines),
                  (ROOT / "nginx" / template).read_text(), flags=re.M)
    values = {"RUN_DIR": str(run_dir), "FRONT_HOST": front[0], "FRONT_PORT": str(front[1])}
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise ValueError(f"nginx/{template}: unknown placeholders {sorted(set(left))}")
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "nginx.conf"
    out.write_text(text)
    return out


def command(conf: Path) -> list[str]:
    """Nginx in the foreground (the config says `daemon off`) with this config."""
    exe = procs.require_binary("nginx", NGINX_HINT)
    return [exe, "-c", str(conf), "-p", str(conf.parent), "-e", str(conf.parent / "error.log")]


def check(conf: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """`nginx -t` on a rendered config; returncode 0 when it is valid."""
    return subprocess.run([*(prefix or []), *command(conf), "-t"], capture_output=True,
                          text=True)


def version() -> str | None:
    try:
        exe = procs.require_binary("nginx", NGINX_HINT)
    except procs.ServiceError:
        return None
    out = subprocess.run([exe, "-v"], capture_output=True, text=True)
    return (out.stderr or out.stdout).strip().split("/")[-1] or None
