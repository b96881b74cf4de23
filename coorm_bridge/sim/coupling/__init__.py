"""A coupled application over several clusters, placed four ways on the mock platform.

- :mod:`.platform`: the scenario (clusters, their background load, the application's request),
  the simulated site it builds, and what one strategy's run measured;
- :mod:`.background`: background load cut from the shipped SWF traces, per seed;
- :mod:`.bridge`: the bridge's placeholders (views from snapshots, earliest common start, all-or-
  none hold within the placement horizon);
- :mod:`.waiting`: one ordinary job per cluster, WaitForAll and WaitTillThresholdandExecute;
- :mod:`.viola`: VIOLA's negotiation loop of advance reservations;
- :mod:`.measure`: a strategy's run against the same background without the application.
"""
