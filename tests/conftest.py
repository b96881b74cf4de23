"""The tests run against the installed package (see the README's test command)."""

import os
import shutil
import subprocess

import pytest

try:
    import coorm_bridge.adapters  # noqa: F401
except ImportError as missing:  # pragma: no cover - a set-up error, not a test result
    raise pytest.UsageError(
        "coorm_bridge is not installed in this environment: run the README's test command "
        f"(pip install '.[test]' into a virtual environment) first ({missing})"
    ) from missing


def _mpi_missing() -> str | None:
    if shutil.which("mpirun") is None:
        return "mpirun is not installed (Debian: openmpi-bin)"
    found = subprocess.run(
        ["/usr/bin/python3", "-c", "import mpi4py"], capture_output=True, check=False, cwd="/"
    )
    return None if found.returncode == 0 else "the system Python has no mpi4py (python3-mpi4py)"


@pytest.fixture(scope="session")
def mpi() -> None:
    """Open MPI and the system Python's mpi4py, which the coupled example runs on: skipped
    without them, except in CI (COORM_REQUIRE_MPI=1), where .ci/run installs them."""
    missing = _mpi_missing()
    if missing is not None:
        if os.environ.get("COORM_REQUIRE_MPI") == "1":
            pytest.fail(f"MPI is required here: {missing}")
        pytest.skip(missing)
