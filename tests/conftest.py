"""The tests run against the installed package (see the README's test command)."""

import pytest

try:
    import coorm_bridge.adapters  # noqa: F401
except ImportError as missing:  # pragma: no cover - a set-up error, not a test result
    raise pytest.UsageError(
        "coorm_bridge is not installed in this environment: run the README's test command "
        f"(pip install '.[test]' into a virtual environment) first ({missing})"
    ) from missing
