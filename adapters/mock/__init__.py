"""The simulated platform; see swf, clock and journal.

The mock adapter replays workloads on virtual clusters so that the bridge can be tested and
benchmarked without a real batch system: :mod:`.swf` turns Parallel Workloads Archive traces (or
seeded synthetic load) into replayable jobs, :mod:`.clock` provides the virtual and
accelerated wall clocks that drive the simulation, and :mod:`.journal` keeps a daemon's platform
across restarts (``python -m coorm_bridge.adapters.mock STATE_DIR`` shows what it holds).
"""
