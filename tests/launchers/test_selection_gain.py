"""When a new selection is worth a new request (``[selector] min_gain``): it must end that many
seconds earlier than the current request would, both placed as the bridge places them."""

from __future__ import annotations

import pytest

from coorm_bridge.core.messages import CAP
from coorm_bridge.core.model import ClusterInfo, Interconnect, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.app import AppError, parse_app
from coorm_bridge.launchers.selection import CurrentView, Selection, worth_sending

NOW = 1000
#: c1: 2 hosts free now, 4 from NOW + 1000 on.
VIEW = {"c1": Profile.from_steps([(NOW, 2), (NOW + 1000, 4)])}
WIDE = Request(nodes={"c1": 4}, duration=100)  # starts at NOW + 1000, ends NOW + 1100
NARROW = Request(nodes={"c1": 2}, duration=900)  # starts now, ends NOW + 900


@pytest.mark.parametrize(
    ("min_gain", "sent"), [(0, True), (1, True), (200, True), (201, False), (10_000, False)]
)
def test_a_new_request_must_end_min_gain_earlier(min_gain, sent):
    assert worth_sending(VIEW, WIDE, NARROW, NOW, min_gain) is sent


def test_a_later_ending_selection_is_kept_out_whatever_the_gain_asked():
    assert worth_sending(VIEW, NARROW, WIDE, NOW, 0) is True  # no threshold: as the selector says
    assert worth_sending(VIEW, NARROW, WIDE, NOW, 1) is False


def test_nothing_new_is_never_sent_and_a_first_request_always_is():
    assert worth_sending(VIEW, WIDE, WIDE, NOW, 0) is False
    assert worth_sending(VIEW, WIDE, None, NOW, 0) is False
    assert worth_sending(VIEW, None, WIDE, NOW, 10_000) is True


def test_a_current_request_that_no_longer_fits_is_replaced():
    gone = Request(nodes={"c2": 1}, duration=100)  # c2 left the view
    assert worth_sending(VIEW, gone, NARROW, NOW, 10_000) is True
    too_big = Request(nodes={"c1": 5}, duration=100)
    assert worth_sending(VIEW, too_big, NARROW, NOW, 10_000) is True


class Answers:
    def __init__(self, *requests: Request) -> None:
        self.requests = list(requests)

    def select(self, clusters, interconnect, view, now):
        return self.requests.pop(0)


def _view(free_now: int) -> CurrentView:
    view = CurrentView({"c1": ClusterInfo(name="c1", hosts=4)}, Interconnect())
    view.caps["c1"] = CAP(cluster="c1", steps=((NOW, free_now), (NOW + 1000, 4)))
    return view


def test_the_launcher_keeps_its_request_when_the_gain_is_too_small():
    app = parse_app('[selector]\nmin_gain = 300\n[[component]]\nname = "a"\ncommand = ["a"]')
    selection = Selection(Answers(WIDE, NARROW), app)
    first = selection.select(_view(2), NOW)
    assert first == WIDE
    # a different view, a selection that gains 200 s only: the current request stays
    assert selection.select(_view(3), NOW, current=first) == WIDE
    assert selection.computed == 2


@pytest.mark.parametrize("bad", ["-1", '"60"', "1.5", "315576001"])
def test_min_gain_is_a_bounded_whole_number_of_seconds(bad):
    with pytest.raises(AppError, match="min_gain"):
        parse_app(f'[selector]\nmin_gain = {bad}\n[[component]]\nname = "a"\ncommand = ["a"]')
