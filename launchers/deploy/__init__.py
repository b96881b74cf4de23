"""Deployment: one job per cluster, inside the bridge's placeholder, on exactly the hosts granted.

The bridge says per cluster how to submit (``ClusterInfo.submission``); :func:`deployer_for`
picks the deployer of that kind. Each kind's module is imported only when a cluster uses it, so
a launcher on the mock never loads SSH or Slurm's parsers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coorm_bridge.core.model import ClusterInfo
from coorm_bridge.launchers.deploy.base import Deployer, DeployError, JobStatus

__all__ = ["DeployError", "Deployer", "JobStatus", "deployer_for"]


def deployer_for(info: ClusterInfo, front_end: Callable[[], Any], session: str) -> Deployer:
    """The deployer of ``info``'s submission kind. ``front_end()`` makes a client of the
    bridge, for the kinds it takes jobs for itself (the mock)."""
    submission = getattr(info, "submission", None)
    if submission is None:
        raise DeployError(
            f"{info.name}: the bridge does not say how to submit jobs there (its adapter gives "
            "no submission): this launcher cannot deploy on it"
        )
    kind = submission.kind
    if kind == "slurm":
        from coorm_bridge.launchers.deploy.slurm import SlurmDeployer  # noqa: PLC0415

        return SlurmDeployer(info.name, submission)
    if kind == "mock":
        from coorm_bridge.launchers.deploy.mock import MockDeployer  # noqa: PLC0415

        return MockDeployer(info.name, front_end(), session)
    if kind == "oar":
        from coorm_bridge.launchers.deploy.oar import OarDeployer  # noqa: PLC0415

        return OarDeployer(info.name, submission)
    raise DeployError(
        f"{info.name}: submission kind {kind!r} is not supported by coorm-launch "
        "(it deploys on 'mock', 'slurm' and 'oar')"
    )
