"""A Python package index on loopback, for the tests that stand in for a box's index and
for a mirror of it: small wheels made here, listed by PEP 503 project pages (PEP 691's
JSON when asked for it) with their sha256, served from a thread.

    with LocalIndex(files, "/simple", "/files") as index: ... index.url ...

Two of them serving the same files under other paths and host names are an index and
its mirror, as far as an installer can tell.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# fixed, so a wheel's bytes (its hash) are the same every run
STAMP = (2020, 1, 1, 0, 0, 0)


def wheel(name: str, version: str, tag: str = "py3-none-any", requires: tuple = ()) -> tuple[
        str, bytes]:
    """(file name, bytes) of a wheel that installs an empty package and says its needs."""
    dist = f"{name.replace('-', '_')}-{version}"
    members = {
        f"{name.replace('-', '_')}/__init__.py": "",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                      f"Version: {version}\n"
                                      + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: tests\n"
                                   f"Root-Is-Purelib: true\nTag: {tag}\n",
    }
    members[f"{dist}.dist-info/RECORD"] = "".join(f"{p},,\n" for p in members) + \
        f"{dist}.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in members.items():
            zf.writestr(zipfile.ZipInfo(path, STAMP), text)
    return f"{dist}-{tag}.whl", out.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def project(filename: str) -> str:
    """A file's project, PEP 503's spelling."""
    return re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()


class LocalIndex:
    """files (name -> bytes) served on host:port: project pages under `simple`, the
    files under `files_at` (absolute links, as an index whose files live elsewhere);
    json_api=False: HTML pages only, as an older mirror serves them."""

    def __init__(self, files: dict[str, bytes], simple: str = "/simple",
                 files_at: str = "/files", host: str = "127.0.0.1",
                 json_api: bool = True) -> None:
        self.files, self.simple, self.files_at, self.host = files, simple, files_at, host
        self.json_api = json_api
        self.asked: list[str] = []  # the paths asked for, in order
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self, head: bool = False) -> None:  # noqa: N802 (http.server's name)
                index.asked.append(self.path)
                body, kind = index.answer(self.path, self.headers.get("Accept", ""))
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                if not head:
                    self.wfile.write(body or b"")

            def do_HEAD(self) -> None:  # noqa: N802 (uv asks before it downloads)
                self.do_GET(head=True)

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}{self.simple}/"

    def answer(self, path: str, accept: str) -> tuple[bytes | None, str]:
        if path.startswith(self.files_at + "/"):
            return self.files.get(path.removeprefix(self.files_at + "/")), \
                "application/octet-stream"
        name = path.removeprefix(self.simple + "/").strip("/")
        links = {f: f"http://{self.host}:{self.server.server_address[1]}{self.files_at}/{f}"
                 for f in sorted(self.files) if project(f) == name}
        if not path.startswith(self.simple + "/") or not links:
            return None, "text/plain"
        if self.json_api and "application/vnd.pypi.simple.v1+json" in accept:
            page = {"meta": {"api-version": "1.0"}, "name": name, "files": [
                {"filename": f, "url": u, "hashes": {"sha256": sha256(self.files[f])}}
                for f, u in links.items()]}
            return json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json"
        anchors = "".join(f'<a href="{html.escape(u)}#sha256={sha256(self.files[f])}">'
                          f"{html.escape(f)}</a><br/>\n" for f, u in links.items())
        return f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n".encode(), \
            "text/html"

    def __enter__(self) -> LocalIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
