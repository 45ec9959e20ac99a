"""Engine.IO's ping on a timer of gevent's loop: ``FLASK_ENGINEIO_PING=timer``.

A work-around for the library's design. python-engineio 4.15.1 pings a client by
starting a task for every ping (``Socket.schedule_ping`` ->
``server.start_background_task(self._send_ping)``, a greenlet in gevent mode) that sleeps
``ping_interval`` and queues a PING; the client's PONG schedules the next. So every
connected user holds a sleeping greenlet (its stack copy, a page of Python frames: about
8 KiB here; lab 16) whose only work is a timer's.

Here the same ping is a timer of gevent's loop (a C watcher, no greenlet): after
``ping_interval`` its callback, run by the loop, sets ``last_ping`` and queues the PING,
as ``_send_ping`` does after its sleep. Nothing else changes: a PONG schedules the next
ping, Engine.IO's service task closes a socket whose client did not answer within
``ping_timeout`` (``check_ping_timeout``), a closed socket is not pinged. The callback
never blocks: it puts on the socket's queue, which has no bound.

Installed on a server's sockets at their connect (``install``, app/realtime/engineio_socket.py).
"""

from __future__ import annotations

import time

from engineio import packet

from . import engineio_socket


class TimerPing:
    """engineio Socket's ping on a timer (a mixin: app/realtime/engineio_socket.py)."""

    def schedule_ping(self):
        # engineio's schedule_ping, a loop timer in place of the task
        if self.last_ping:
            self.last_ping = None
            from gevent import get_hub
            get_hub().loop.timer(self.server.ping_interval).start(self._ping_due)

    def _ping_due(self):
        # engineio's _send_ping after its sleep (run by gevent's loop: puts, never waits)
        if not self.closing and not self.closed:
            self.last_ping = time.time()
            self.send(packet.Packet(packet.PING))


def install(eio) -> None:
    """Every socket of this Engine.IO server pings on a timer, from its connect on."""
    engineio_socket.extend(eio, TimerPing)
