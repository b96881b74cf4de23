"""A two-component coupled MPI code: each component runs with several ranks on its own cluster,
and the two exchange data every iteration over TCP, as the CooRM paper's CEM application does.

Every rank of a component holds part of a field; each iteration every rank advances its part,
the component sums its boundary values with an MPI reduction, and rank 0 sends that sum to the
other component and receives the other's. Both sums are a known function of the iteration and of
the sender's ranks, so each side checks what it received: a coupling that loses, reorders or
corrupts a message fails the run. Rank 0 writes ``<component>.json`` in the run directory with
what it sent, received and checked, and exits non-zero on any mismatch.

Where to meet comes from the launcher's ``run.json`` (``COORM_RUN_JSON``; this component is
``COORM_COMPONENT``): the first component listed listens on its rendezvous address, the others
connect to it. Run alone (``--alone``) it exchanges with itself, to try it without a launcher.
"""

from __future__ import annotations

import time

#: When this rank began, before MPI starts: the launcher's checks compare the components' beginnings
#: (the batch system started them together); MPI_Init, at the import below, takes longer for more
#: ranks on a busy machine and is the application's own.
BEGAN = time.time()

import argparse  # noqa: E402 - after the time it began
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from mpi4py import MPI  # noqa: E402

_VALUE = struct.Struct("!qd")  # iteration, boundary sum


def boundary(iteration: int, rank: int, ranks: int) -> float:
    """The value rank ``rank`` of ``ranks`` contributes at ``iteration``: deterministic, so the
    receiver can tell what the sender's sum must be."""
    return float(iteration * ranks + rank) + 0.5


def expected_sum(iteration: int, ranks: int) -> float:
    return sum(boundary(iteration, r, ranks) for r in range(ranks))


def meet(run: dict, me: str, timeout: float) -> tuple[socket.socket, str, int]:
    """A TCP connection to the other component, its name, and its number of ranks."""
    components = run["components"]
    names = list(components)
    first = names[0]
    other = next(n for n in names if n != me)
    address = components[first]["rendezvous"]
    if me == first:
        server = socket.create_server(("", int(address["port"])), reuse_port=False)
        server.settimeout(timeout)
        connection, _ = server.accept()
        server.close()
    else:
        deadline = time.monotonic() + timeout
        while True:
            try:
                connection = socket.create_connection((address["host"], int(address["port"])), 5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    connection.settimeout(timeout)
    return connection, other, int(components[other]["processes"])


def exchange(connection: socket.socket, iteration: int, value: float) -> tuple[int, float]:
    connection.sendall(_VALUE.pack(iteration, value))
    data = b""
    while len(data) < _VALUE.size:
        chunk = connection.recv(_VALUE.size - len(data))
        if not chunk:
            raise ConnectionError("the other component closed the coupling")
        data += chunk
    got_iteration, got = _VALUE.unpack(data)
    return got_iteration, got


def main() -> int:
    started = BEGAN
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--alone", action="store_true", help="exchange with no one (a check)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    me = os.environ.get("COORM_COMPONENT", "alone")
    connection = None
    other, other_ranks = me, ranks
    if rank == 0 and not args.alone:
        run = json.loads(Path(os.environ["COORM_RUN_JSON"]).read_text())
        connection, other, other_ranks = meet(run, me, args.timeout)
    other_ranks = comm.bcast(other_ranks, root=0)
    sent, received, bad = [], [], []
    for iteration in range(args.iterations):
        local = boundary(iteration, rank, ranks)
        total = comm.reduce(local, op=MPI.SUM, root=0)
        got = None
        if rank == 0:
            if connection is None:
                got_iteration, got = iteration, total
            else:
                got_iteration, got = exchange(connection, iteration, total)
            sent.append(total)
            received.append(got)
            if got_iteration != iteration or got != expected_sum(iteration, other_ranks):
                bad.append(iteration)
        got = comm.bcast(got, root=0)  # every rank uses the other side's value
    if rank == 0:
        if connection is not None:
            connection.close()
        report = {
            "component": me,
            "started": started,
            "ranks": ranks,
            "other": other,
            "other_ranks": other_ranks,
            "iterations": args.iterations,
            "sent": sent,
            "received": received,
            "mismatches": bad,
            "ok": not bad and len(received) == args.iterations,
        }
        folder = Path(os.environ.get("COORM_RUN_DIR", "."))
        (folder / f"{me}.json").write_text(json.dumps(report, indent=1))
        print(
            f"{me}: {ranks} ranks, {args.iterations} exchanges with {other}: "
            f"{'ok' if report['ok'] else 'MISMATCH at ' + str(bad)}"
        )
        return 0 if report["ok"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
