"""``coorm-bridge web``: the pages on loopback, for the user who runs it.

The server reads the bridge as that user (over the bridge's socket the daemon knows them by
their uid), so its pages show what that user's own calls would: their sessions, or everyone's
for an admin. Anyone else on the machine could reach a loopback port, so every read needs the
token the server made at its start, given in the printed link's fragment (a browser sends a
fragment to no server; the page reads it and sends it as a bearer token). Only reads go
through, and only those the pages make: nothing a page does can change a session.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from coorm_bridge.launchers.client import BridgeClient, BridgeError, BridgeUnreachable
from coorm_bridge.launchers.web_address import WebAddress, announce, withdraw
from coorm_bridge.protocol import MAX_WAIT
from coorm_bridge.web import pages

log = logging.getLogger(__name__)

#: The reads the pages make, relayed as they are; anything else is not found.
RELAYED = re.compile(
    r"/(health|clusters|availability|sessions|passes|admin/sessions"
    r"|clusters/[^/]+/occupancy|sessions/[^/]+|sessions/[^/]+/events)"
)
#: Query parameters the pages send (others are dropped, not passed on).
PARAMETERS = frozenset({"after", "wait", "user", "state", "watch"})


def create_web_app(client: Callable[[], BridgeClient], token: str) -> FastAPI:
    """The page server: ``/ui/`` from the package, ``/v1/`` relayed to the bridge by
    ``client()`` (one client per worker thread: a client is not thread-safe)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/v1/{path:path}", include_in_schema=False)
    def relay(
        path: str, request: Request, authorization: Annotated[str, Header()] = ""
    ) -> Response:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return _error(401, "unauthenticated", "open the link coorm-bridge web printed")
        if not RELAYED.fullmatch(f"/{path}"):
            return _error(404, "not_found", f"no page reads /v1/{path}")
        params = {k: v for k, v in request.query_params.items() if k in PARAMETERS}
        if path.endswith("/events"):
            params["watch"] = "true"  # a page follows the session; it is not its launcher
        try:
            wait = min(max(float(params.get("wait", "0")), 0.0), MAX_WAIT)
        except ValueError:
            wait = 0.0  # the bridge refuses it with the reason
        try:
            status, kind, body = client().relay(f"/{path}", params, timeout=wait + 15)
        except (BridgeUnreachable, BridgeError) as error:
            return _error(502, "unreachable", str(error))
        return Response(body, status, media_type=kind, headers={"cache-control": "no-store"})

    app.mount("/ui", pages(), name="ui")
    return app


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


def serve_pages(
    url: str | None, bridge_token: str | None, ca: str | None, host: str, port: int
) -> int:
    """Run the page server until Ctrl-C, then end the process (exit status 0); print its link;
    tell this user's launchers where it is (:mod:`coorm_bridge.launchers.web_address`). Returns
    only when it cannot start (its status)."""
    probe = BridgeClient(url, token=bridge_token, verify=ca)
    try:
        probe.health()
    except BridgeError as error:
        print(f"coorm-bridge web: {error}")
        return 1
    finally:
        probe.close()
    local = threading.local()

    def client() -> BridgeClient:
        found: BridgeClient | None = getattr(local, "client", None)
        if found is None:
            found = local.client = BridgeClient(url, token=bridge_token, verify=ca)
        return found

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        # The token would cross the network in clear: other machines reach the pages through
        # an SSH tunnel to this port, or the daemon's own TLS listener (its /ui/).
        print(
            f"coorm-bridge web: {host} is not a loopback address: serve on 127.0.0.1 or ::1 "
            "and forward the port over SSH, or open the daemon's TLS listener's /ui/"
        )
        return 2
    token = secrets.token_urlsafe(24)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        print(f"coorm-bridge web: cannot listen on {host}:{port}: {error.strerror}")
        return 1
    listener.listen(128)
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    address = WebAddress(
        url=f"http://{shown}:{bound}", token=token, bridge=probe.url, pid=os.getpid()
    )
    written = announce(address)
    print(f"coorm-bridge web: {address.page('')}  (reading {probe.url}; Ctrl-C stops)", flush=True)
    config = uvicorn.Config(
        create_web_app(client, token),
        log_level="warning",
        access_log=False,
        lifespan="off",
        # A page's long poll (up to a minute) is not worth waiting for at Ctrl-C.
        timeout_graceful_shutdown=1,
    )
    try:
        uvicorn.Server(config).run(sockets=[listener])
    except KeyboardInterrupt:
        pass  # uvicorn stops on Ctrl-C, then raises it again: stopped as asked
    finally:
        withdraw(address.pid, written)
        listener.close()
    # Relayed reads still blocked on the bridge (a page's long poll, up to a minute) hold their
    # threads, which the interpreter would wait for: nothing of theirs is worth it (they only
    # read), so the process ends now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
