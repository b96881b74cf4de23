"""coorm-bridge: CooRM views and co-allocation beside Slurm and OAR.

The package holds the model, the availability profiles and the policy; the adapters
(``coorm_bridge.adapters``) and the launcher side (``coorm_bridge.launchers``) are subpackages
kept in their own top-level folders of the repository.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("coorm-bridge")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
