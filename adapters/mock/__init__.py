"""The simulated platform; see swf and clock.

The mock adapter replays workloads on virtual clusters so that the bridge can be tested and
benchmarked without a real batch system: :mod:`.swf` turns Parallel Workloads Archive traces (or
seeded synthetic load) into replayable jobs, and :mod:`.clock` provides the virtual and
accelerated wall clocks that drive the simulation.
"""
