"""The real-time server: Socket.IO on the Flask app (server.py) and on asyncio
(server_asgi.py, for app/asgi.py, over server.py's rules), the Engine.IO guard in
front of each (socket_guard.py; socket_guard_asgi.py, its asyncio adapter), and stage
10's websocket with fewer greenlets a user (inline_websocket.py, ping_timer.py,
direct_writer.py, on engineio_socket.py's Socket).

Nothing is imported here: importing one module does not import the rest.
"""
