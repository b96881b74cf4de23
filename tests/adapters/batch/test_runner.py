"""LocalRunner: a command that does not answer in time is Unavailable, with what it said."""

from __future__ import annotations

import time

import pytest

from coorm_bridge.adapters.batch.runner import SAID_MAX, LocalRunner, said_so_far
from coorm_bridge.core.batch import Unavailable


def test_a_command_that_times_out_says_what_it_printed_on_stderr():
    # As Slurm's commands do for a slurm.conf that is not there: say why, then retry.
    script = "echo 'error: cannot stat file /x/slurm.conf' >&2; echo again >&2; exec sleep 10"
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        LocalRunner().run(["sh", "-c", script], timeout=1)
    assert time.monotonic() - started < 5
    assert str(caught.value) == (
        "sh did not answer within 1 s; it said: error: cannot stat file /x/slurm.conf / again"
    )


def test_a_silent_command_that_times_out_says_only_that():
    with pytest.raises(Unavailable) as caught:
        LocalRunner().run(["sleep", "10"], timeout=0.5)
    assert str(caught.value) == "sleep did not answer within 0.5 s"


def test_what_was_said_is_read_once_per_line_and_bounded():
    assert said_so_far(None) == ""
    assert said_so_far(b"\n  \n") == ""
    assert (
        said_so_far(b"retrying\nretrying\nr\xe9trying\n") == "; it said: retrying / r\ufffdtrying"
    )
    long = said_so_far("x" * 5000 + "\nthe end")
    assert long.endswith("the end")
    assert len(long) == len("; it said: ") + SAID_MAX
