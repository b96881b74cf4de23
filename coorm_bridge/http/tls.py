"""TLS on the TCP listener: the files it presents, and the settings uvicorn builds its SSL context
from (the Unix socket stays plain: its identity is the peer's uid)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

#: What TLS clients may negotiate: TLS 1.2 or later, forward-secret AEAD suites for TLS 1.2
#: (TLS 1.3 suites are all fine). uvicorn's default cipher string would also allow CBC suites.
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The PEM certificate (its chain after it) and private key the TCP listener presents."""

    certificate: Path
    key: Path


def tls_options(tls: TlsFiles | None) -> dict[str, Any]:
    """uvicorn's settings for its SSL context: our files, our ciphers, TLS 1.2 at least."""
    if tls is None:
        return {}

    def at_least_tls_1_2(
        config: uvicorn.Config, default: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        context = default()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    return {
        "ssl_certfile": str(tls.certificate),
        "ssl_keyfile": str(tls.key),
        "ssl_ciphers": TLS_CIPHERS,
        "ssl_context_factory": at_least_tls_1_2,
    }
