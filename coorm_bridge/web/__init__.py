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

from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def pages() -> StaticFiles:
    """The pages, served as files from the installed package (nothing fetched at run time)."""
    return StaticFiles(directory=STATIC, html=True)
