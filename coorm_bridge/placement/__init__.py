"""Placement: the placeholder reservations that make the policy's promises hold in batch systems.

Occupancy (what the batch systems leave free), co-allocation (one start on every cluster, or
nothing), the placeholders' book (hold, move, shrink to a ghost, release) and reconciliation.
"""
