"""HTTP API v1 over the service: the FastAPI application, its routes, the uvicorn server (Unix
socket with peer credentials, or TCP with bearer tokens), errors as statuses, Prometheus metrics.

The bodies it exchanges are :mod:`coorm_bridge.protocol`, below the service, so that the service
can answer with them and launchers can read them without loading FastAPI.
"""
