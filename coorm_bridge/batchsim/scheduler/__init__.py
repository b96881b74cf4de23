"""One cluster's batch scheduler in simulated time (:class:`LocalScheduler`) and its records.

The names to import are these; the modules beside them are the scheduler's parts.
"""

from coorm_bridge.batchsim.scheduler.jobs import JobRecord, LocalJobSpec, SchedulingPolicy
from coorm_bridge.batchsim.scheduler.scheduler import LocalScheduler

__all__ = ["JobRecord", "LocalJobSpec", "LocalScheduler", "SchedulingPolicy"]
