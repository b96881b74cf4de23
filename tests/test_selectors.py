"""Selectors are found by name through the entry-point group, as coorm-launch will load them."""

import pytest

from coorm_bridge.core.model import ClusterInfo, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import Rigid, load_selector


def test_rigid_is_registered_and_asks_the_same_whatever_the_view():
    cls = load_selector("rigid")
    assert cls is Rigid
    selector = cls({"c1": 4, "c2": 2}, 600)
    clusters = {name: ClusterInfo(name=name, hosts=8) for name in ("c1", "c2")}
    empty = {"c1": Profile.constant(0), "c2": Profile.constant(0)}
    full = {"c1": Profile.constant(8), "c2": Profile.constant(8)}
    expected = Request(nodes={"c1": 4, "c2": 2}, duration=600)
    assert selector.select(clusters, empty, 0) == expected
    assert selector.select(clusters, full, 0) == expected


def test_rigid_refuses_clusters_it_cannot_see():
    selector = Rigid({"c9": 1}, 60)
    with pytest.raises(ValueError, match="c9"):
        selector.select({"c1": ClusterInfo(name="c1", hosts=1)}, {}, 0)


def test_unknown_selector_names_the_installed_ones():
    with pytest.raises(LookupError, match="rigid"):
        load_selector("no-such-selector")
