"""The service: launcher sessions, passes, placements, polling, the loop, configuration, wiring.

:mod:`.wiring` is the composition root: it builds every part below, once, and hands each its
collaborators and callbacks. :mod:`.bridge` holds the session operations the HTTP API calls, and
:mod:`.jobs` the jobs through the front end; :mod:`.passes` plans a pass and records it (states,
estimates, events) without calling any batch system; :mod:`.enactor` carries out what the passes
want of the batch systems; :mod:`.recorder` writes every session change with its event;
:mod:`.polling` keeps each batch system's last snapshot; :mod:`.loop` drives the poller, the
passes, the enactor, the reconciler and the job runner on APScheduler; :mod:`.stats` holds the
counters ``/metrics`` shows.

Locks and transactions (outermost first; the rules are enforced where the comment says):

1. The working lock (``Enactor.working``, the same lock the loop's reconciliation takes) is held
   while batch systems are changed: one enactment or one reconciliation at a time. Nothing else
   waits for it; it may be held for as long as the batch systems take.
2. The bridge's lock (made by the composition root, given to the bridge, the job desk, the pass
   runner, the enactor and the catalogue) serialises the session operations that write, each
   pass, and the enactor's recording of an outcome, so a pass always sees one consistent
   application table. It is never held across a batch-system call: passes call none, the
   enactor takes it only to record.
   Reads (session info, events, long polls, health, metrics) never take it, and an answer to a
   request waits for the next pass on an asyncio event, not in a worker thread.
3. ``Store._lock`` is innermost: a store transaction holds it until the commit. Inside a
   transaction, call no batch system, wait for no other thread and take no other lock. The
   placeholders' book and reconciliation assert it (``not store.in_transaction``) before every
   batch-system call.
4. ``Poller._lock`` guards the per-cluster statuses only; a snapshot is taken outside it, so a
   silent batch system never blocks readers of the others' statuses.
5. ``Loop._rescheduling`` orders a job's rescheduling against ``Loop.stop``; nothing is called
   under it but the scheduler's own methods.
6. Each adapter has its own locks (the mock platform's, an SSH connection's, a REST session's):
   the daemon calls adapters from several threads, and they are leaves (an adapter never calls
   back into the service).
"""
