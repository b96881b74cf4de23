"""The core: the CooRM domain model, availability profiles and the policy.

Pure computation, no I/O: nothing here talks to a batch system, a database or a network. Every
other layer builds on it (store, placement, service, http, cli); it imports none of them.
"""
