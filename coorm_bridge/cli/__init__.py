"""The ``coorm-bridge`` command: ``serve``, ``status``, ``demo``."""
