"""Selectors as plug-ins: found by entry point or ``module:Class``, built from validated
parameters whose errors name the key."""

import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from coorm_bridge.core.model import MAX_DURATION, Interconnect, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import (
    Rigid,
    SelectorParamsError,
    create_selector,
    installed,
    load_selector,
)
from tests.launchers.platforms import NOW, infos

NONE = Interconnect()


def test_rigid_is_registered_under_its_name():
    assert "rigid" in installed()
    assert load_selector("rigid") is Rigid


def test_rigid_asks_the_same_whatever_the_view():
    selector = create_selector("rigid", {"nodes": {"c1": 4, "c2": 2}, "duration": 600})
    clusters = infos(c1=8, c2=8)
    expected = Request(nodes={"c1": 4, "c2": 2}, duration=600)
    for free in (0, 8):
        view = {"c1": Profile.constant(free), "c2": Profile.constant(free)}
        assert selector.select(clusters, NONE, view, NOW) == expected


def test_rigid_refuses_clusters_it_cannot_see():
    selector = Rigid(Rigid.Params(nodes={"c9": 1}, duration=60))
    with pytest.raises(ValueError, match="c9"):
        selector.select(infos(c1=1), NONE, {}, NOW)


def test_an_unknown_name_lists_the_installed_selectors():
    with pytest.raises(LookupError, match=r"installed: .*rigid.* \(or give module:Class\)"):
        load_selector("no-such-selector")


APP_MODULE = """
from coorm_bridge.core.model import Request
from coorm_bridge.launchers.selectors import Params


class HalfParams(Params):
    cluster: str
    duration: int


class Half:
    '''Half of what one cluster has free now.'''

    Params = HalfParams

    def __init__(self, params):
        self.params = params

    def select(self, clusters, interconnect, view, now):
        free = view[self.params.cluster].value_at(now)
        if free < 2:
            return None
        return Request(nodes={self.params.cluster: free // 2}, duration=self.params.duration)


class Namespace:
    Half = Half


def not_a_class():
    pass


class NoSelect:
    Params = HalfParams


class NoParams:
    def select(self, clusters, interconnect, view, now):
        return None
"""


@pytest.fixture
def app_code(tmp_path, monkeypatch):
    """A selector shipped with an application's code, importable as ``myapp_selectors``."""
    (tmp_path / "myapp_selectors.py").write_text(APP_MODULE)
    (tmp_path / "myapp_broken.py").write_text("import no_such_dependency_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "myapp_selectors"
    for name in ("myapp_selectors", "myapp_broken"):
        sys.modules.pop(name, None)


def test_a_selector_shipped_with_the_application_loads_as_module_colon_class(app_code):
    selector = create_selector(f"{app_code}:Half", {"cluster": "c1", "duration": 60})
    view = {"c1": Profile.constant(9)}
    assert selector.select(infos(c1=10), NONE, view, NOW) == Request(nodes={"c1": 4}, duration=60)
    assert load_selector(f"{app_code}:Namespace.Half") is load_selector(f"{app_code}:Half")
    with pytest.raises(SelectorParamsError, match=r"selector\.duration: Field required"):
        create_selector(f"{app_code}:Half", {"cluster": "c1"})


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("myapp_selectors:Nothing", LookupError, "myapp_selectors has no Nothing"),
        ("myapp_nowhere:Half", LookupError, "no module 'myapp_nowhere'"),
        ("myapp selectors:Half", LookupError, "neither an installed selector nor module:Class"),
        ("myapp_selectors:", LookupError, "neither an installed selector nor module:Class"),
        ("myapp_selectors:not_a_class", TypeError, "does not name a class"),
        ("myapp_selectors:NoParams", TypeError, "no Params model"),
        ("myapp_selectors:NoSelect", TypeError, r"no select\(\) method"),
    ],
)
def test_a_wrong_module_colon_class_says_what_is_wrong(app_code, name, error, message):
    with pytest.raises(error, match=message):
        load_selector(name)


def test_a_module_that_fails_its_own_imports_is_not_reported_missing(app_code):
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_anywhere"):
        load_selector("myapp_broken:Anything")


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("rigid", {"nodes": {}, "duration": 60}, r"selector\.nodes: "),
        ("rigid", {"nodes": {"c1": 0}, "duration": 60}, r"selector\.nodes\.c1: "),
        ("rigid", {"nodes": {"c1": True}, "duration": 60}, r"selector\.nodes\.c1: "),
        ("rigid", {"nodes": {"c1": 1}, "duration": MAX_DURATION + 1}, r"selector\.duration: "),
    ],
)
def test_bad_parameters_name_the_key(name, params, message):
    with pytest.raises(SelectorParamsError, match=message):
        create_selector(name, params)


def test_the_key_is_prefixed_as_the_caller_says():
    with pytest.raises(SelectorParamsError, match=r"^selector 'rigid': app\.selector\.duration"):
        create_selector("rigid", {"nodes": {"c1": 1}}, where="app.selector")


def test_parameters_are_frozen():
    params = Rigid.Params(nodes={"c1": 1}, duration=60)
    with pytest.raises(ValidationError):
        params.duration = 120  # type: ignore[misc]


def test_loading_the_selectors_imports_no_numpy():
    """The launcher imports its selector before it has a view: numpy comes with the first one."""
    code = textwrap.dedent(
        """
        import sys
        from coorm_bridge.launchers.selectors import load_selector
        for name in ("rigid", "moldable", "cem"):
            load_selector(name)
        import coorm_bridge.launchers.selectors.memo
        print(sorted(m for m in sys.modules if m.split(".")[0] == "numpy"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"
