"""Prometheus metrics, read from the service at scrape time (nothing to keep in step by hand).

The paper's cost measures (passes, notifications, computed configurations) sit beside what a site
admin watches: sessions per state, placements and their failures, and which batch systems answer.
The counters come from the service's stats; the gauges from the store (sessions, placeholders, its
size on disk), the poller (which batch systems answer) and the open problems (the bridge's rights).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coorm_bridge.store.rows import PlaceholderStatus

if TYPE_CHECKING:
    from coorm_bridge.service.wiring import Service


class BridgeCollector(Collector):
    """Every metric of ``/metrics``, from the parts of ``service`` it names."""

    def __init__(self, service: Service) -> None:
        self.stats = service.stats
        self.store = service.store
        self.poller = service.poller
        self.problems = service.problems

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        sessions = GaugeMetricFamily("coorm_sessions", "Sessions per state.", labels=["state"])
        for state, count in self.store.counts().items():
            sessions.add_metric([state.value], count)
        yield sessions
        for name, value, text in (
            ("coorm_policy_passes", stats.policy.passes, "Policy passes run."),
            ("coorm_notifications", stats.policy.notifications, "Views sent to applications."),
            (
                "coorm_computed_configurations",
                stats.policy.computed_configurations,
                "Distinct views handed to applications' selectors.",
            ),
            ("coorm_recomputed", stats.policy.recomputed, "Earliest-start searches run."),
            ("coorm_placements", stats.placements, "Applications started on placeholders."),
            (
                "coorm_placement_failures",
                stats.placement_failures,
                "Co-allocation attempts that failed and were rolled back.",
            ),
            (
                "coorm_reconciliations",
                stats.reconciliations,
                "Reconciliation passes run (the first one before the daemon serves).",
            ),
            (
                "coorm_session_errors",
                stats.session_errors,
                "Sessions set aside after an unexpected error (each logged once at ERROR).",
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)
        held = GaugeMetricFamily(
            "coorm_placeholders", "Placeholder reservations per status.", labels=["status"]
        )
        statuses = Counter(p.status.value for p in self.store.placeholders())
        for status in PlaceholderStatus:
            held.add_metric([status.value], statuses[status.value])
        yield held
        calls = CounterMetricFamily(
            "coorm_reservation_calls",
            "Reservation calls made to the batch systems, per call (each is work for a "
            "site's controller).",
            labels=["call"],
        )
        for call in ("create", "update", "delete"):
            calls.add_metric([call], stats.reservation_calls[call])
        yield calls
        yield CounterMetricFamily(
            "coorm_unheeded_changes",
            "View changes not sent: past the horizon of the launcher's choice.",
            value=stats.unheeded,
        )
        repaired = CounterMetricFamily(
            "coorm_reconciled", "Reconciliation repairs, per action.", labels=["action"]
        )
        for action, count in sorted(stats.repairs.items()):
            repaired.add_metric([action], count)
        yield repaired
        up = GaugeMetricFamily(
            "coorm_cluster_up", "1 if the batch system answered its last poll.", labels=["cluster"]
        )
        failures = GaugeMetricFamily(
            "coorm_cluster_poll_failures", "Polls failed in a row.", labels=["cluster"]
        )
        rights = GaugeMetricFamily(
            "coorm_cluster_rights",
            "1 if the batch system lets the bridge hold reservations (0: an admin must grant "
            "its account the rights; see /v1/health).",
            labels=["cluster"],
        )
        overruns = CounterMetricFamily(
            "coorm_cluster_poll_overruns",
            "Polls that came due while the one before still ran (a slow or stopped batch "
            "system: after two intervals its cluster is stale).",
            labels=["cluster"],
        )
        for cluster, polled in self.poller.statuses().items():
            up.add_metric([cluster], 0 if polled.stale else 1)
            failures.add_metric([cluster], polled.failures)
            overruns.add_metric([cluster], polled.overruns)
            rights.add_metric([cluster], 0 if self.problems.has("rights", cluster) else 1)
        yield up
        yield failures
        yield overruns
        yield rights
        yield GaugeMetricFamily(
            "coorm_store_bytes",
            "Bytes the store takes on disk: the database file and its write-ahead log.",
            value=self.store.size(),
        )
        # Launchers waiting on their events, each with a connection and a task in the daemon.
        text = "Long polls and event streams waiting for their session's events."
        yield GaugeMetricFamily("coorm_long_polls", text, value=stats.long_polls)
