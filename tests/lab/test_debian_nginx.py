"""nginx/conf.d/socketio-split.conf copied into a stock Debian Nginx (issue 43, part 4).

Debian's nginx-common ships /etc/nginx/nginx.conf, which includes conf.d/*.conf and
then sites-enabled/*, and enables a default site, `listen 80 default_server`. The test
builds that layout in a temporary prefix from this box's own files (paths moved into
the prefix, port 80 moved to a free port), drops in the lab's conf.d file as
docs/your-stack.md says (every placeholder filled, listening on every address, the
same port), and asks the real Nginx: `nginx -t` passes, and a request whose Host no
server names goes to Debian's site until the default site is removed as the doc says,
then to the lab's server. Which server answered is told by the lab's own
`location = /nginx_status` (Nginx's counters, allowed from 127.0.0.1): Debian's site
has none and answers 404.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from benchmarks import stages
from benchmarks.sandbox import nginx_conf, procs

DEBIAN = Path("/etc/nginx")
DOC = stages.ROOT / "docs" / "your-stack.md"
REMOVE_DEFAULT = "sudo rm /etc/nginx/sites-enabled/default"

pytestmark = pytest.mark.skipif(
    not (DEBIAN / "nginx.conf").is_file() or not (DEBIAN / "sites-enabled" / "default").exists()
    or not shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin"),
    reason="needs Debian's nginx-common layout (/etc/nginx/nginx.conf, sites-enabled/default)")


def stock_layout(prefix: Path, port: int, front_host: str) -> Path:
    """Debian's /etc/nginx as a copy under `prefix` (its includes, pid and logs moved
    there, its default site on `port`) with the lab's split config in conf.d/; the main
    file's path."""
    main = (DEBIAN / "nginx.conf").read_text()
    main = main.replace(f"{DEBIAN}/", f"{prefix}/").replace("/run/nginx.pid", f"{prefix}/nginx.pid")
    (prefix / "logs").mkdir(parents=True)
    (prefix / "nginx.conf").write_text(main.replace("/var/log/nginx/", f"{prefix}/logs/"))
    shutil.copy(DEBIAN / "mime.types", prefix / "mime.types")
    shutil.copytree(DEBIAN / "modules-enabled", prefix / "modules-enabled", symlinks=True)
    # a module is loaded from `modules/` under the prefix (Debian's: /usr/share/nginx)
    (prefix / "modules").symlink_to(Path("/usr/share/nginx/modules").resolve())
    (prefix / "sites-enabled").mkdir()
    default = (DEBIAN / "sites-enabled" / "default").read_text()
    assert "listen 80 default_server;" in default  # what the package ships
    (prefix / "sites-enabled" / "default").write_text(
        re.sub(r"(listen (?:\[::\]:)?)80 ", rf"\g<1>{port} ", default))
    (prefix / "conf.d").mkdir()
    (prefix / "conf.d" / "socketio-split.conf").write_text(nginx_conf.fill(
        "conf.d/socketio-split.conf", {"FRONT_HOST": front_host, "FRONT_PORT": str(port)},
        [f"server 127.0.0.1:{procs.free_port()};"],
        [f"server 127.0.0.1:{procs.free_port()};"]))
    return prefix / "nginx.conf"


def nginx(*args: str) -> list[str]:
    return [procs.require_binary("nginx", nginx_conf.NGINX_HINT), *args]


def who_answers(main: Path, port: int) -> int:
    """Start that Nginx, ask it for /nginx_status with a Host no server names, stop it:
    the status (200: the lab's server; 404: Debian's default site)."""
    prefix = main.parent
    server = procs.start(nginx("-p", str(prefix), "-c", str(main), "-g", "daemon off;"),
                         log=prefix / "nginx.out")
    try:
        procs.wait_for_port(port, proc=server)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/nginx_status",
                                         headers={"Host": "chat.example.org"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                assert b"Active connections" in response.read()
                return response.status
        except urllib.error.HTTPError as e:
            return e.code
    finally:
        procs.stop(server, sig=signal.SIGQUIT)  # Nginx's quick shutdown


def test_the_doc_says_what_to_do_with_debians_default_site():
    text = " ".join(DOC.read_text().split())
    assert REMOVE_DEFAULT in text and "default_server" in text
    for name in ("socketio-split.conf", "upstream-keepalive.conf", "proxy.conf"):
        assert "sites-enabled/default" in (stages.ROOT / "nginx" / "conf.d" / name).read_text()


def test_the_split_config_in_a_stock_debian_layout(tmp_path):
    port = procs.free_port()
    main = stock_layout(tmp_path / "everywhere", port, "0.0.0.0")
    checked = subprocess.run(nginx("-t", "-p", str(main.parent), "-c", str(main)),
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    # on every address, beside Debian's default site: the default site takes it
    assert who_answers(main, port) == 404
    # and the lab's server cannot be made the default beside it
    split = main.parent / "conf.d" / "socketio-split.conf"
    text = split.read_text()
    split.write_text(text.replace(f"listen 0.0.0.0:{port};", f"listen 0.0.0.0:{port} "
                                  "default_server;"))
    refused = subprocess.run(nginx("-t", "-p", str(main.parent), "-c", str(main)),
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "duplicate default server" in refused.stderr
    split.write_text(text)
    # the doc's instruction: the default site removed, the lab's server answers
    (main.parent / "sites-enabled" / "default").unlink()
    assert who_answers(main, port) == 200
    # on an address of its own, the lab's server is that address's default even beside
    # Debian's site, which keeps the machine's other addresses
    port = procs.free_port()
    main = stock_layout(tmp_path / "one-address", port, "127.0.0.1")
    assert who_answers(main, port) == 200
