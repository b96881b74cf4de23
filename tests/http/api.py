"""What the in-process API tests share: the users' tokens and the platform (their fixtures, a
running service and a client over it, are in conftest.py)."""

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789abc"
ROOT = "root-token-0123456789ab"
PLATFORM = """
[[cluster]]
name = "c1"
hosts = 8
[[cluster]]
name = "c2"
hosts = 4
"""
