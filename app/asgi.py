"""ASGI entry point of the asyncio Socket.IO server: ``granian --interface asgi app.asgi:app``.

Socket.IO only (and /healthz): the HTTP API stays on its WSGI server, as stage 9
splits them (Nginx's location). Configured as the Flask app is, from the same
settings and ``FLASK_*`` environment (``create_app``): the shared rules read them
from that app's context (app/realtime/server_asgi.py).

Why granian (its ASGI interface) and not uvicorn: granian 2.8.7 is already in the
lab's lock and is stage 9's HTTP server, so the asyncio server adds no package and
no second server to learn; uvicorn would add one to the lock and to the measured
environment. Which of the two holds more users on a core is the capacity study's
question (issue 50), not assumed here.
"""

from . import create_app
from .realtime.server_asgi import create_asgi_app

flask_app = create_app()
app = create_asgi_app(flask_app)
