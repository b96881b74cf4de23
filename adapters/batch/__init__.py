"""The generic part of every batch-system adapter (Slurm today, OAR next).

psij-python's split: :class:`~coorm_bridge.adapters.batch.adapter.BatchAdapter` validates,
verifies what the batch system made, fills in missing start estimates and maps failures to the
adapter interface's errors; a batch system only supplies a :class:`.backend.Backend` (command
builders and parsers, its commands run by a :mod:`.runner` here or over SSH) and the
:class:`.backend.Binding` that addresses each of its clusters.
"""
