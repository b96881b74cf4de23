"""``coorm-sim``: the CooRM paper's experiments rerun with this project's own code, in virtual time.

Every experiment runs the same pieces the daemon and ``coorm-launch`` run (the policy of
:mod:`coorm_bridge.core.policy`, the selectors of :mod:`coorm_bridge.launchers.selectors`, the
wire models of :mod:`coorm_bridge.protocol`, the local schedulers of the simulated batch system,
:mod:`coorm_bridge.batchsim`) without the daemon's store and HTTP server, so that a
200-application schedule takes seconds and measures what the paper measured: configurations
computed, CPU time, bytes on the wire.

- :mod:`.experiment`: what an experiment supplies (its runs, one run, its report) and the registry;
- :mod:`.sweep`: many runs on the local cores or as a Slurm job array, resumable, merged in order;
- :mod:`.cli`: the ``coorm-sim`` command.
"""
