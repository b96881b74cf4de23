"""A mixed site: several batch systems (Slurm, OAR, the simulated platform...) behind one
bridge, each cluster polled and reserved through its own system's adapter, co-allocation
spanning them. Settings in :mod:`.settings`, the composite adapter in :mod:`.adapter`."""
