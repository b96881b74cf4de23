"""HTTP API v1: wire types, the FastAPI application, its routes and the uvicorn server.

This ``__init__`` imports nothing: :mod:`coorm_bridge.protocol` is what launchers import, and it
must not drag FastAPI or uvicorn in.
"""
