"""A TCP forward from the machine's 127.0.0.1:PORT (or another address) into a lab host.

Locust's web UI runs on the client host (a network namespace), where the
machine's browser cannot reach it. `Forward` listens on the machine and, for
each connection, opens one inside the host (a socket made in the namespace
stays there: benchmarks/capture/kernel.py's `in_netns`) and copies bytes both ways,
a thread per direction: a browser opens a handful of connections.
"""

from __future__ import annotations

import socket
import threading

from benchmarks.capture.kernel import in_netns


class PortTaken(RuntimeError):
    pass


class Forward:
    """`listener` (see `listen`) on the machine -> `target` inside namespace `netns`."""

    def __init__(self, listener: socket.socket, netns: str, target: tuple[str, int]):
        self.listener, self.netns, self.target = listener, netns, target
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True, name="ui-forward")

    def start(self) -> Forward:
        self.thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:  # closed by stop()
                return
            try:
                with in_netns(self.netns):
                    up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                up.settimeout(5)
                up.connect(self.target)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self.lock:
                self.open |= {down, up}
            pending = [2]  # the second pump to end closes the pair
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b, pending), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pending: list[int]) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:
            pending[0] -= 1
            if pending[0] == 0:
                for s in (src, dst):
                    s.close()
                    self.open.discard(s)

    def stop(self) -> None:
        try:  # wakes the thread blocked in accept(): a close alone leaves it listening
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        with self.lock:
            for s in self.open:
                s.close()
            self.open.clear()


def listen(port: int, address: str = "127.0.0.1") -> socket.socket:
    """A listening socket on the machine's address:port (127.0.0.1, or 0.0.0.0 for a
    container's port mapping), or PortTaken that says so."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address, port))
    except OSError as e:
        s.close()
        raise PortTaken(f"port {port} on {address} is taken ({e.strerror})") from e
    s.listen(64)
    return s
