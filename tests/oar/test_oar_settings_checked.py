"""The settings the OAR adapter checks against OAR's resources when it reads its clusters (at
the daemon's start): ``property``, a cluster's ``value`` (or its ``name``), ``host_property``.
A wrong one is the admin's mistake (Misconfigured: its key in the ``[adapter]`` table, and
what OAR has instead), on the resources recorded from OAR 2.5.9 (``oarnodes_J.json``: clusters
alpha and beta of 8 hosts, 2 cores each; properties cluster, host, cpu, core) through the
commands, and on the same rows through the REST API. The real OAR: test_oar_config_errors.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
import responses

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.cli_backend import OarCliBackend
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.core.batch import Misconfigured
from tests.oar.samples import details_page, load

URL = "http://oar.example/oarapi"
PROPERTIES = "cluster, core, cpu, host"


class Nodes(Runner):
    """``oarnodes -J`` answering ``rows`` (resource id -> properties); nothing else is asked."""

    def __init__(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        self.rows = rows

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        assert tuple(argv[:2]) == ("oarnodes", "-J"), argv
        return Completed(0, json.dumps(self.rows), "")


def recorded() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(load("oarnodes_J.json"))


def settings(*clusters: Mapping[str, Any], **adapter: Any) -> OarSettings:
    tables = clusters or ({"name": "alpha"}, {"name": "beta"})
    return OarSettings.model_validate({"kind": "oar", "cluster": list(tables), **adapter})


def read(oar: OarSettings, rows: Mapping[str, Mapping[str, Any]] | None = None) -> Misconfigured:
    """The mistake the adapter finds reading its clusters from ``rows`` (the recorded ones)."""
    backend = OarCliBackend(Nodes(recorded() if rows is None else rows), identity="root")
    with pytest.raises(Misconfigured) as caught:
        OarAdapter(oar, backend).clusters()
    return caught.value


def test_a_property_no_resource_has_is_named_with_those_they_have() -> None:
    found = read(settings(property="clustr"))
    assert found.key == "property"
    assert (
        found.reason
        == f"OAR has no resource property 'clustr'; its resource properties: {PROPERTIES}"
    )


def test_a_value_no_resource_has_is_named_with_the_values_there_are() -> None:
    found = read(settings({"name": "alpha", "value": "alphaa"}))
    assert found.key == "cluster.0.value"
    assert (
        found.reason
        == "OAR has no resource with cluster='alphaa'; values of 'cluster': alpha, beta"
    )
    assert found.cluster == "alpha"


def test_a_cluster_oar_does_not_have_is_its_name_without_a_value() -> None:
    found = read(settings({"name": "alpha"}, {"name": "gamma", "speed": 2}))
    assert found.key == "cluster.1.name"
    assert (
        found.reason == "OAR has no resource with cluster='gamma'; values of 'cluster': alpha, beta"
    )


def test_the_values_of_another_property_are_listed_in_natural_order_and_bounded() -> None:
    found = read(settings({"name": "alpha", "value": "alpha"}, property="core"))
    assert found.key == "cluster.0.value"
    assert found.reason == (
        "OAR has no resource with core='alpha'; values of 'core': "
        + ", ".join(str(n) for n in range(1, 21))
        + " and 12 more"
    )


def test_a_host_property_no_resource_has_is_named_with_those_they_have() -> None:
    # Before, every host was its network address: 8 hosts shown, then every placeholder
    # failed on OAR's SQL error (hots IN (...)), retried for ever.
    found = read(settings(host_property="hots"))
    assert found.key == "host_property"
    assert found.reason == (
        f"OAR has no resource property 'hots'; its resource properties: {PROPERTIES} (or OAR's "
        "own network_address)"
    )


def test_every_resource_of_the_cluster_must_name_its_host() -> None:
    rows = recorded()
    for row in rows.values():
        row["hostname"] = row["host"]
    rows["1"]["hostname"] = rows["2"]["hostname"] = None  # alpha-1: NULL in OAR
    rows["3"]["hostname"] = rows["4"]["hostname"] = " "  # alpha-2
    found = read(settings(host_property="hostname"), rows)
    assert found.key == "host_property"
    assert found.reason == (
        "4 of the 16 resources with cluster='alpha' have no 'hostname' (resources 1, 2, 3, 4): "
        "each must name its host"
    )
    # beta's resources all name theirs: beta alone is fine.
    backend = OarCliBackend(Nodes(rows), identity="root")
    (beta,) = OarAdapter(settings({"name": "beta"}, host_property="hostname"), backend).clusters()
    assert (beta.hosts, beta.cores_per_host) == (8, 2)


def test_a_host_property_may_not_count_one_network_address_as_several_hosts() -> None:
    # OAR lists a job's hosts by network address: with core, a job on alpha-1 would hold one
    # of its two "hosts", and the other would look free.
    found = read(settings(host_property="core"))
    assert found.key == "host_property"
    assert found.reason == (
        "'core' counts 16 hosts on the 8 network addresses of the resources with "
        "cluster='alpha' (network address alpha-1 has core 1, 2): OAR places jobs on network "
        "addresses, so the resources of one address must name one host"
    )
    # One host over several network addresses is one host: two machines per chassis, numbered
    # from 0 in each cluster (0 is a name like any other, not a missing one).
    rows = recorded()
    for row in rows.values():
        row["chassis"] = (int(row["host"].rsplit("-", 1)[1]) - 1) // 2
    backend = OarCliBackend(Nodes(rows), identity="root")
    infos = OarAdapter(settings(host_property="chassis"), backend).clusters()
    assert [(c.hosts, c.cores_per_host) for c in infos] == [(4, 4), (4, 4)]


# -- the same through the REST API ------------------------------------------------------------


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def rest(mocked: responses.RequestsMock, rows: list[dict[str, Any]]) -> None:
    """Serve ``rows`` as ``/resources/details`` in two pages, shaped as oarapi.pl does: ``id``
    for ``resource_id`` (fix_resource_ids), with ``links`` and ``api_timestamp``."""
    items = [
        {k: v for k, v in r.items() if k != "resource_id"}
        | {"id": r["resource_id"], "api_timestamp": 1795230469}
        | {"links": [{"rel": "self", "href": f"/oarapi/resources/{r['resource_id']}"}]}
        for r in rows
    ]
    half = len(items) // 2
    mocked.get(
        f"{URL}/resources/details.json",
        json=details_page(items[:half], len(items)),
        match=[responses.matchers.query_param_matcher({"limit": "500", "offset": "0"})],
    )
    mocked.get(
        f"{URL}/resources/details.json",
        json=details_page(items[half:], len(items), half),
        match=[responses.matchers.query_param_matcher({"limit": "500", "offset": str(half)})],
    )


def rest_settings(**adapter: Any) -> OarSettings:
    tables = adapter.pop("cluster", ())
    return settings(*tables, backend="rest", rest={"url": URL}, **adapter)


@pytest.mark.parametrize(
    ("adapter", "key", "reason"),
    [
        (
            {"property": "clustr"},
            "property",
            f"OAR has no resource property 'clustr'; its resource properties: {PROPERTIES}",
        ),
        (
            {"host_property": "hots"},
            "host_property",
            f"OAR has no resource property 'hots'; its resource properties: {PROPERTIES} (or "
            "OAR's own network_address)",
        ),
        (
            {"cluster": [{"name": "beta"}, {"name": "alpha", "value": "Alpha"}]},
            "cluster.1.value",
            "OAR has no resource with cluster='Alpha'; values of 'cluster': alpha, beta",
        ),
    ],
)
def test_the_rest_api_resources_are_checked_the_same(mocked, adapter, key, reason) -> None:
    # The API's rows have id, links and api_timestamp besides the resources table's columns.
    oar = rest_settings(**adapter)
    rows = sorted(recorded().values(), key=lambda r: r["resource_id"])
    rest(mocked, rows)
    assert oar.rest is not None
    with pytest.raises(Misconfigured) as caught:
        OarAdapter(oar, OarRestBackend(oar.rest, timeout=5)).clusters()
    assert (caught.value.key, caught.value.reason) == (key, reason)


def test_rest_resources_without_a_host_are_named_by_their_id(mocked) -> None:
    oar = rest_settings(host_property="hostname")
    rows = sorted(recorded().values(), key=lambda r: r["resource_id"])
    for row in rows:
        row["hostname"] = None if row["resource_id"] == 9 else row["host"]
    rest(mocked, rows)
    assert oar.rest is not None
    with pytest.raises(Misconfigured) as caught:
        OarAdapter(oar, OarRestBackend(oar.rest, timeout=5)).clusters()
    assert caught.value.reason == (
        "1 of the 16 resources with cluster='alpha' has no 'hostname' (resource 9): each must "
        "name its host"
    )
    assert caught.value.key == "host_property"
