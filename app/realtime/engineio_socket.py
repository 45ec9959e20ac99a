"""engineio's Socket with our changes for gevent mode, each a mixin a setting adds
(app/realtime/ping_timer.py's TimerPing, app/realtime/direct_writer.py's DirectWriter).

engineio makes its Socket in ``Server._handle_connect`` with no say in the class; the
server's ``connect`` event is the first moment the socket is ours, before its first
``schedule_ping`` and before its websocket is served: there its class becomes one made of
every mixin this server was given and engineio's Socket (same fields: only methods differ).
"""

from __future__ import annotations

from engineio.socket import Socket


def extend(eio, mixin: type) -> None:
    """Every socket of this Engine.IO server has `mixin`'s methods, from its connect on."""
    mixins = getattr(eio, "socket_mixins", None)
    if mixins is None:
        mixins = eio.socket_mixins = []
        on_connect = eio.handlers["connect"]

        def connect(sid, environ):
            socket = eio.sockets.get(sid)
            if type(socket) is Socket:
                socket.__class__ = eio.socket_class
            return on_connect(sid, environ)

        eio.on("connect", connect)
    mixins.append(mixin)
    eio.socket_class = type("Socket", (*mixins, Socket), {})
