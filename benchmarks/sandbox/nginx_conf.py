"""Render the real Nginx configs in nginx/ for one stage, and check them with `nginx -t`.

The files use at-sign placeholders such as `@APP_PORT@` (Nginx's own syntax already uses `$name`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from benchmarks.sandbox import procs
from benchmarks.stages import ROOT

NGINX_HINT = ("Install it: `apt-get install nginx-light` (Debian/Ubuntu, as root), "
              "or run `make setup`.")


def render(template: str, run_dir: Path, app: tuple[str, int],
           front: tuple[str, int]) -> Path:
    """Write nginx/<template> filled in for this run to run_dir/nginx.conf: the app's
    (address, port) upstream, Nginx's own (address, port) to listen on."""
    text = (ROOT / "nginx" / template).read_text()
    values = {"RUN_DIR": str(run_dir), "APP_HOST": app[0], "APP_PORT": str(app[1]),
              "FRONT_HOST": front[0], "FRONT_PORT": str(front[1])}
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
