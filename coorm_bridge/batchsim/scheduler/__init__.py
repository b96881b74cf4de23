"""One cluster's batch scheduler in simulated time (:class:`LocalScheduler`) and its records.

The names to import are these (from :mod:`coorm_bridge.batchsim`); the modules beside them are
the scheduler's parts, each with its own state, which :class:`LocalScheduler` composes (see
:mod:`.scheduler`).
"""

from coorm_bridge.batchsim.scheduler.jobs import JobRecord, LocalJobSpec, SchedulingPolicy
from coorm_bridge.batchsim.scheduler.scheduler import LocalScheduler

__all__ = ["JobRecord", "LocalJobSpec", "LocalScheduler", "SchedulingPolicy"]
