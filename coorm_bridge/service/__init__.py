"""The service: launcher sessions, passes, polling, the periodic loop, configuration, wiring.

:mod:`.bridge` holds the session operations the HTTP API calls; :mod:`.passes` carries out what
the policy planned (states, events, placeholders); :mod:`.polling` keeps each batch system's last
snapshot; :mod:`.loop` runs polling, passes and reconciliation on APScheduler.

Locks and transactions (outermost first; the rules are enforced where the comment says):

1. ``Bridge._lock`` (with its condition ``_passed``) serialises the session operations that
   write, each pass and each reconciliation, so a pass always sees one consistent application
   table. Reads (session info, events, long polls, health, metrics) never take it.
2. ``Store._lock`` is innermost: a store transaction holds it until the commit. Inside a
   transaction, call no batch system, wait for no other thread and take no other lock. The
   placeholders' book and reconciliation assert it (``not store.in_transaction``) before every
   batch-system call; a pass writes its states and events in one transaction and calls the batch
   systems after the commit.
3. ``Poller._lock`` guards the per-cluster statuses only; a snapshot is taken outside it, so a
   silent batch system never blocks readers of the others' statuses.
4. ``Loop._rescheduling`` orders a polling job's rescheduling against ``Loop.stop``; nothing is
   called under it but the scheduler's own methods.
5. Each adapter has its own locks (the mock platform's, an SSH connection's, a REST session's):
   the daemon calls adapters from several threads, and they are leaves (an adapter never calls
   back into the service).
"""
