"""The composition root: every part of the service built here, once, from the configuration.

Each part gets its collaborators and callbacks through its constructor and keeps them; none
builds another, none is given anything afterwards, and none reaches through one part for
another. :func:`assemble` builds the parts over an adapter and a store (what tests and tools
use); :func:`build` first locks the state folder and makes the adapter and the store from the
configuration (what ``coorm-bridge serve`` uses, with the HTTP server on top,
:mod:`coorm_bridge.cli.serve`).

Who drives what: the loop (:mod:`.loop`) polls, runs passes, enactments, reconciliations and
the front end's jobs; the HTTP API calls the bridge (sessions), the job desk (jobs; v2
requests' jobs through :mod:`.request_jobs`), the admin commands (:mod:`.admin`), and reads
the stats; the listeners carry news from the recorder and the passes to the HTTP layer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.registry import AdapterContext, create_adapter
from coorm_bridge.core.batch import Misconfigured
from coorm_bridge.core.policy import Policy
from coorm_bridge.placement.counted import CountedAdapter
from coorm_bridge.placement.placeholders import Placeholders
from coorm_bridge.placement.reconcile import Reconciler
from coorm_bridge.service.admin import Admin
from coorm_bridge.service.batchrules import BatchRules
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.catalogue import Catalogue, first_read
from coorm_bridge.service.config import Config, ConfigError
from coorm_bridge.service.due import Due
from coorm_bridge.service.enactor import Enactor
from coorm_bridge.service.evolving import Evolving
from coorm_bridge.service.evolving_pass import EvolvingPass
from coorm_bridge.service.groups import Groups
from coorm_bridge.service.jobrunner import JobRunner
from coorm_bridge.service.jobs import JobDesk
from coorm_bridge.service.limits import UserLimits
from coorm_bridge.service.listeners import Listeners
from coorm_bridge.service.loop import Loop
from coorm_bridge.service.passes import PassRunner, own_prefix
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.problems import Problems
from coorm_bridge.service.quiet import Quiet
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.service.request_jobs import RequestJobs
from coorm_bridge.service.settings import Settings
from coorm_bridge.service.silence import Silence
from coorm_bridge.service.stats import Stats
from coorm_bridge.store import Store
from coorm_bridge.store.lock import StateLock


def make_adapter(config: Config) -> Adapter:
    """The adapter of the installed plug-in the ``[adapter]`` table's kind names, given the
    state folder (made private, as for the database) for whatever state it keeps."""
    state = config.bridge.state_path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    context = AdapterContext(state_dir=state, private=config.bridge.private)
    return create_adapter(config.adapter, context)


def open_store(config: Config) -> Store:
    """The database, in a state folder only its owner can read (sessions name users)."""
    path = config.bridge.database
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return Store(path)


@dataclass(frozen=True)
class Service:
    """The daemon's parts, as :func:`assemble` made them. The HTTP app is built over the
    bridge, the job desk, the pass runner (a request's answer at a stop), the listeners, the
    stats and what else ``/metrics`` reads; tests step the loop and look at the parts."""

    config: Config
    settings: Settings
    """What a reload changes (limits, admins, tokens): the bridge and the HTTP identity read
    them here at each request."""
    adapter: Adapter
    store: Store
    lock: threading.RLock
    """The bridge's lock (see the package docstring)."""
    stats: Stats
    listeners: Listeners
    catalogue: Catalogue
    limits: UserLimits
    rules: BatchRules
    poller: Poller
    problems: Problems
    placeholders: Placeholders
    enactor: Enactor
    passes: PassRunner
    reconciler: Reconciler
    bridge: Bridge
    jobs: JobDesk
    request_jobs: RequestJobs
    """The jobs of evolving applications' requests (API v2), accepted by the job desk."""
    admin: Admin
    job_runner: JobRunner
    loop: Loop
    folder: StateLock | None = None
    """The state folder's lock, held by a daemon (:func:`build`) until it closes."""

    def close(self) -> None:
        """Stop the loop, then close the adapter (no session operation under way) and the
        store, in the reverse of the order they were made."""
        try:
            self.loop.stop()
            with self.lock:
                self.adapter.close()
            self.limits.groups.close()
            self.store.close()
        finally:
            if self.folder is not None:
                self.folder.release()


def assemble(
    config: Config, adapter: Adapter, store: Store, folder: StateLock | None = None
) -> Service:
    """Every part of the service over ``adapter`` and ``store``, the loop not started. Reads
    the clusters (:func:`.catalogue.first_read`: a batch system that does not answer leaves
    them as last read), which raises what the adapter raises when it cannot say them at all."""
    read = first_read(adapter, store)
    infos, interconnect, clusters = read.infos, read.interconnect, read.clusters
    prefix = own_prefix(config, store)
    lock = threading.RLock()
    working = threading.Lock()  # held while batch systems change: one enactment or repair
    jobs_due = threading.Event()
    listeners = Listeners()
    settings = Settings(config)
    due = Due()
    policy = Policy(config.policy)
    stats = Stats(policy=policy.counters)
    recorder = Recorder(store, notify=listeners.sessions_changed)
    poller = Poller(adapter, clusters, prefix, config.placement.poll_interval)
    problems = Problems()
    placeholders = Placeholders(CountedAdapter(adapter, stats.reservation_calls), store, prefix)
    silence = Silence(store, recorder, config.bridge.session_timeout, adapter.now())
    quiet = Quiet()
    catalogue = Catalogue(
        adapter=adapter,
        store=store,
        recorder=recorder,
        lock=lock,
        trigger=due.trigger,
        infos=infos,
        interconnect=interconnect,
        unread=read.unread,
    )
    groups = Groups()
    rules = BatchRules(adapter, clusters, groups)
    # At start, as the catalogue is read (not where it could not be): then with the polls.
    rules.refresh([name for name in clusters if name not in read.unread])
    limits = UserLimits(
        settings=lambda: settings.current.limits,
        store=store,
        groups=groups,
        total=lambda: sum(info.hosts for info in catalogue.infos),
        fair_start=config.policy.fair_start,
    )
    enactor = Enactor(
        config=config,
        adapter=adapter,
        store=store,
        placeholders=placeholders,
        poller=poller,
        recorder=recorder,
        problems=problems,
        lock=lock,
        working=working,
        trigger=due.trigger,
        stats=stats,
    )
    views = EvolvingPass(
        store=store,
        rules=rules,
        poller=poller,
        recorder=recorder,
        grace=config.policy.preempt_grace,
    )
    passes = PassRunner(
        config=config,
        adapter=adapter,
        store=store,
        limits=limits,
        rules=rules,
        policy=policy,
        poller=poller,
        recorder=recorder,
        enactor=enactor,
        silence=silence,
        due=due,
        lock=lock,
        passed=listeners.pass_ran,
        stats=stats,
        evolving=views,
        quiet=quiet,
    )
    reconciler = Reconciler(placeholders, lost=passes.lost)
    bridge = Bridge(
        config=config,
        settings=settings,
        adapter=adapter,
        store=store,
        catalogue=catalogue,
        limits=limits,
        rules=rules,
        passes=passes,
        poller=poller,
        problems=problems,
        recorder=recorder,
        silence=silence,
        quiet=quiet,
        due=due,
        stats=stats,
        lock=lock,
    )
    evolving = bridge.evolving = Evolving(bridge, views)
    placeholders.choose = views.book.hosts_for
    placeholders.reclaimed = views.book.reclaims
    recorder.ending = views.close_all
    jobs = JobDesk(
        adapter=adapter,
        store=store,
        catalogue=catalogue,
        lock=lock,
        own=bridge.own,
        wake=jobs_due.set,
    )
    request_jobs = RequestJobs(desk=jobs, evolving=evolving)
    admin = Admin(
        config=config,
        adapter=adapter,
        store=store,
        catalogue=catalogue,
        recorder=recorder,
        due=due,
        lock=lock,
        own=bridge.own,
        is_admin=bridge.is_admin,
        wake=jobs_due.set,
    )
    job_runner = JobRunner(adapter, store)
    loop = Loop(
        config=config,
        adapter=adapter,
        store=store,
        poller=poller,
        rules=rules,
        passes=passes,
        enactor=enactor,
        reconciler=reconciler,
        catalogue=catalogue,
        problems=problems,
        job_runner=job_runner,
        due=due,
        working=working,
        jobs_due=jobs_due,
        stats=stats,
    )
    return Service(
        config=config,
        settings=settings,
        adapter=adapter,
        store=store,
        lock=lock,
        stats=stats,
        listeners=listeners,
        catalogue=catalogue,
        limits=limits,
        rules=rules,
        poller=poller,
        problems=problems,
        placeholders=placeholders,
        enactor=enactor,
        passes=passes,
        reconciler=reconciler,
        bridge=bridge,
        jobs=jobs,
        request_jobs=request_jobs,
        admin=admin,
        job_runner=job_runner,
        loop=loop,
        folder=folder,
    )


def build(config: Config) -> Service:
    """Lock the state folder, then make adapter and store and assemble the service (the loop
    not started); raises StoreError when another daemon holds the folder or the database
    cannot be used, ConfigError when the batch system shows a setting of the file to be wrong
    (a partition it does not have), AdapterError when it cannot say its clusters (one that does
    not answer, when the adapter cannot name them without it: see :func:`.catalogue.first_read`)."""
    state = config.bridge.state_path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = StateLock(state)
    folder.acquire()
    adapter = store = None
    try:
        adapter = make_adapter(config)
        store = open_store(config)
        return assemble(config, adapter, store, folder)
    except BaseException as error:
        if store is not None:
            store.close()
        if adapter is not None:
            adapter.close()
        folder.release()
        if isinstance(error, Misconfigured):
            raise misconfigured(config, error) from error
        raise


def misconfigured(config: Config, error: Misconfigured) -> ConfigError:
    """A setting the batch system refuses, as a mistake in the file: one line naming the file
    and the key as written there (``adapter.cluster.0.partition``), then why."""
    return ConfigError(f"{config.source}: adapter.{error.key}: {error.reason}")
