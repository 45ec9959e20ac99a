"""Render the real Nginx configs in nginx/ for one stage, and check them with `nginx -t`.

Two files per stage, as on a real machine: the lab's main file, nginx/nginx.conf
(the process, its logs, limits and temp folders, all under the run folder), which
`include`s the stage's conf.d file, nginx/conf.d/proxy.conf or
nginx/conf.d/upstream-keepalive.conf (the `upstream` and the `server`: what a user
copies to /etc/nginx/conf.d/). Both are rendered into the run folder, the main one
as nginx.conf, the stage's at the same path as under nginx/ (conf.d/...).

The files use at-sign placeholders such as `@FRONT_PORT@` (Nginx's own syntax already uses
`$name`); `@APP_SERVERS@` becomes one upstream `server` line per app host (and
`@SOCKETIO_SERVERS@`, in a file with a Socket.IO upstream of its own, one per app
host's Socket.IO server), and `@FRONT_CONF@` the rendered stage file's path.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.sandbox import procs
from benchmarks.stages import NGINX_SIZE, ROOT, NginxSize

NGINX_HINT = ("Install it: `apt-get install nginx-light` (Debian/Ubuntu, as root), "
              "or run `make setup`.")
NGINX = ROOT / "nginx"
MAIN = "nginx.conf"  # the lab's main file, under nginx/ and in the run folder


def fill(name: str, values: Mapping[str, str], app_servers: Sequence[str] = (),
         socketio_servers: Sequence[str] = ()) -> str:
    """nginx/<name> with its placeholders filled: `@NAME@` from `values`, and a line
    holding only `@APP_SERVERS@` (`@SOCKETIO_SERVERS@`) replaced by `app_servers`
    (`socketio_servers`), one a line, indented as it was. ValueError for a placeholder
    left."""
    text = (NGINX / name).read_text()
    for placeholder, lines in (("APP_SERVERS", app_servers),
                               ("SOCKETIO_SERVERS", socketio_servers)):
        text = re.sub(rf"^( *)@{placeholder}@$",
                      lambda m, lines=lines: "\n".join(m[1] + ln for ln in lines),
                      text, flags=re.M)
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise ValueError(f"nginx/{name}: unknown placeholders {sorted(set(left))}")
    return text


def render(template: str, run_dir: Path, apps: Sequence[tuple[str, int]],
           front: tuple[str, int], balance: str | None = None,
           socketio: Sequence[tuple[str, int]] = (), size: NginxSize = NGINX_SIZE) -> Path:
    """Render the stage's nginx/<template> (`conf.d/proxy.conf`) to run_dir/<template>,
    and the main nginx/nginx.conf, which includes it, to run_dir/nginx.conf; return the
    main file's path. The app hosts' (address, port) become the upstream's servers, after
    the upstream's `balance` method if any (`ip_hash`; none: round robin); `front` is
    Nginx's own (address, port) to listen on; `socketio`, the Socket.IO servers'
    (address, port), the servers of a file's Socket.IO upstream (stage 9); `size`,
    Nginx's processes (the stage's `nginx`: how many, their connections and file
    descriptors), goes to the main file."""
    if not apps:
        raise ValueError("an upstream needs at least one app server")
    if bool(socketio) != ("@SOCKETIO_SERVERS@" in (NGINX / template).read_text()):
        raise ValueError(f"nginx/{template}: Socket.IO servers given for a file without "
                         "a Socket.IO upstream, or none for one with it")
    if template == MAIN:
        raise ValueError(f"nginx/{MAIN} is the main file; name the stage's conf.d file")
    servers = ([f"{balance};"] if balance else []) + [f"server {h}:{p};" for h, p in apps]
    stage_text = fill(template, {"FRONT_HOST": front[0], "FRONT_PORT": str(front[1])},
                      servers, [f"server {h}:{p};" for h, p in socketio])
    included = run_dir / template
    main_text = fill(MAIN, {"RUN_DIR": str(run_dir), "FRONT_CONF": str(included),
                            "WORKER_PROCESSES": size.workers,
                            "WORKER_RLIMIT_NOFILE": str(size.nofile),
                            "WORKER_CONNECTIONS": str(size.worker_connections)})
    included.parent.mkdir(parents=True, exist_ok=True)
    included.write_text(stage_text)
    out = run_dir / MAIN
    out.write_text(main_text)
    return out


IDLE_MARGIN_S = 0.5  # past an upstream's keepalive_timeout: Nginx's timer has fired


def upstream_idle_s(name: str | None) -> float:
    """Seconds after its last request by which Nginx has closed an idle cached upstream
    connection of nginx/<name> (holding its port in TIME_WAIT): the longest
    `keepalive_timeout` of its `upstream` blocks, and IDLE_MARGIN_S; 0 for no file or a
    file without upstream keep-alive."""
    text = (NGINX / name).read_text() if name else ""
    found = [float(s) for block in re.finditer(r"^upstream \w+ \{(.*?)^\}", text, re.M | re.S)
             for s in re.findall(r"^\s*keepalive_timeout (\d+)s;", block[1], re.M)]
    return max(found) + IDLE_MARGIN_S if found else 0.0


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
