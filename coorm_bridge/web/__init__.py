"""The web view: Gantt charts of every cluster, each session's view, the sessions and the
bridge's health, live in a browser.

The pages (``static/``) are plain files drawn by a small script of our own on a canvas, so a
1,000-host cluster with 10,000 jobs draws in well under a second and nothing is fetched from
elsewhere. The daemon serves them under ``/ui/`` on its TCP listener; ``coorm-bridge web``
(:mod:`.server`) serves them on loopback for the user who runs it, relaying the pages' reads to
the bridge's socket with that user's identity.
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"

#: The pages run only their own scripts and read only their own origin: were a text from the
#: bridge ever taken for markup, no script of anyone else's would run, nor any data leave.
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)


class Pages(StaticFiles):
    """The package's page files, each with :data:`POLICY` and never framed by another site."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["content-security-policy"] = POLICY
        response.headers["x-content-type-options"] = "nosniff"
        response.headers["referrer-policy"] = "no-referrer"
        return response


def pages() -> StaticFiles:
    """The pages, served as files from the installed package (nothing fetched at run time)."""
    return Pages(directory=STATIC, html=True)
