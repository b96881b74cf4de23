"""The simulated batch system: clusters under their own batch schedulers, in simulated time.

The mock adapter (:mod:`coorm_bridge.adapters.mock`), the experiments (:mod:`coorm_bridge.sim`),
the tests and the benchmarks run on it. They import the names below from here, never its modules,
so that its parts can change without them. It depends on the core's batch vocabulary only
(:mod:`coorm_bridge.core.batch`: nodes, jobs, reservations, refusals).

- The platform's description: :class:`PlatformSpec` (clusters as :class:`ClusterSpec`, links,
  background loads as :class:`TraceLoad` or :class:`SyntheticLoad`, scheduled outages as
  :class:`OutageSpec`), read by :func:`load_platform` from a TOML file or the packaged default.
- :class:`Site`: a platform running on a :class:`Clock`, what a client of its batch systems asks
  (snapshots, reservations, jobs); its :attr:`Site.controls` (:class:`SiteControls`) is what only
  its owner does: move virtual time, inject faults, change the site. A job's simulated run time
  is its :data:`RUNTIME_KEY` environment variable; a refusal injected by the controls is a
  :class:`SimulatedRefusal`.
- Persistence: a site given a :class:`Journal` records every call that changes it (:mod:`.calls`)
  with its simulated time, and a new site on the same journal replays them; the daemon keeps it
  in its state folder as :data:`FILE_NAME`, and resumes on the wall clock :func:`resumed_clock`
  gives (where the site's time would be had it kept running, from the journal's :class:`Anchor`).
- :class:`LocalScheduler`: one cluster's batch scheduler (FCFS with conservative or EASY
  backfilling, as :class:`SchedulingPolicy` says; advance reservations with Slurm's refusals;
  node faults), time moved only by :meth:`LocalScheduler.advance`; its jobs are
  :class:`LocalJobSpec`, their history :class:`JobRecord`. A site has one per cluster
  (:attr:`Site.schedulers`), and experiments may use one alone.
- Clocks: :class:`VirtualClock` (discrete events, deterministic) and :class:`WallClock` (the
  host's time, sped up).
- Background load: Standard Workload Format traces (:func:`read_swf`, :func:`replay_jobs`), two of
  them shipped (:func:`trace_path`), or seeded synthetic jobs (:func:`synthetic_jobs`).
- Its bounds (:data:`MAX_TIME`, :data:`MAX_DURATION`, :data:`MAX_SPEEDUP`, :data:`MAX_HOSTS`,
  :data:`MAX_JOBS`), so that no number it reports overflows the bridge's 64-bit times.
"""

from coorm_bridge.batchsim import calls
from coorm_bridge.batchsim.clock import Clock, Handle, VirtualClock, WallClock
from coorm_bridge.batchsim.controls import SiteControls
from coorm_bridge.batchsim.faults import SimulatedRefusal
from coorm_bridge.batchsim.journal import FILE_NAME, Anchor, Entry, Journal
from coorm_bridge.batchsim.limits import (
    MAX_DURATION,
    MAX_HOSTS,
    MAX_JOBS,
    MAX_SPEEDUP,
    MAX_TIME,
    MAX_TIME_TEXT,
    SPEEDUP_LIMIT,
)
from coorm_bridge.batchsim.platform import (
    DEFAULT_PLATFORM,
    ClusterSpec,
    Load,
    OutageSpec,
    PlatformSpec,
    SyntheticLoad,
    TraceLoad,
    load_platform,
    parse_platform,
)
from coorm_bridge.batchsim.recording import resumed_clock
from coorm_bridge.batchsim.rules import MockRules, UserRule
from coorm_bridge.batchsim.scheduler import (
    JobRecord,
    LocalJobSpec,
    LocalScheduler,
    SchedulingPolicy,
)
from coorm_bridge.batchsim.simulation import RUNTIME_KEY
from coorm_bridge.batchsim.site import Site
from coorm_bridge.batchsim.swf import (
    Replay,
    ReplayJob,
    ReplayReport,
    SwfJob,
    SwfStatus,
    SwfTrace,
    parse_swf,
    read_swf,
    replay_jobs,
    synthetic_jobs,
)
from coorm_bridge.batchsim.traces import TRACES, trace_path

__all__ = [
    "DEFAULT_PLATFORM",
    "FILE_NAME",
    "MAX_DURATION",
    "MAX_HOSTS",
    "MAX_JOBS",
    "MAX_SPEEDUP",
    "MAX_TIME",
    "MAX_TIME_TEXT",
    "RUNTIME_KEY",
    "SPEEDUP_LIMIT",
    "TRACES",
    "Anchor",
    "Clock",
    "ClusterSpec",
    "Entry",
    "Handle",
    "JobRecord",
    "Journal",
    "Load",
    "LocalJobSpec",
    "LocalScheduler",
    "MockRules",
    "OutageSpec",
    "PlatformSpec",
    "Replay",
    "ReplayJob",
    "ReplayReport",
    "SchedulingPolicy",
    "SimulatedRefusal",
    "Site",
    "SiteControls",
    "SwfJob",
    "SwfStatus",
    "SwfTrace",
    "SyntheticLoad",
    "TraceLoad",
    "UserRule",
    "VirtualClock",
    "WallClock",
    "calls",
    "load_platform",
    "parse_platform",
    "parse_swf",
    "read_swf",
    "replay_jobs",
    "resumed_clock",
    "synthetic_jobs",
    "trace_path",
]
