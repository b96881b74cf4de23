"""Virtual and wall clocks of the mock platform; wall-clock tests take well under 2 s in all."""

import logging
import threading
import time

import pytest

from coorm_bridge.batchsim import Clock, VirtualClock, WallClock


def recorder(log, label, clock):
    return lambda: log.append((label, clock.now()))


def test_virtual_clock_fires_in_time_order_ties_in_scheduling_order():
    clock = VirtualClock(1000)
    log = []
    for label, t in [("c", 1030), ("a", 1010), ("b1", 1020), ("b2", 1020), ("b3", 1020)]:
        clock.call_at(t, recorder(log, label, clock))
    assert clock.next_event_time() == 1010
    clock.advance_to(1025)
    assert log == [("a", 1010), ("b1", 1020), ("b2", 1020), ("b3", 1020)]
    assert clock.now() == 1025
    clock.run_until(1030)
    assert log[-1] == ("c", 1030)
    assert clock.next_event_time() is None


def test_cancelled_handles_do_not_fire():
    clock = VirtualClock(0)
    log = []
    keep = clock.call_at(5, recorder(log, "keep", clock))
    drop = clock.call_at(3, recorder(log, "drop", clock))
    drop.cancel()
    assert drop.cancelled
    assert not keep.cancelled
    assert clock.next_event_time() == 5  # the cancelled one no longer counts
    clock.advance_to(10)
    assert log == [("keep", 5)]


def test_callbacks_can_schedule_more_callbacks():
    clock = VirtualClock(0)
    log = []

    def first():
        log.append(("first", clock.now()))
        clock.call_at(clock.now(), recorder(log, "same time", clock))
        clock.call_at(clock.now() - 5, recorder(log, "in the past", clock))
        clock.call_later(4, recorder(log, "later", clock))
        clock.call_at(50, recorder(log, "beyond", clock))

    clock.call_at(2, first)
    clock.advance_to(20)
    assert log == [("first", 2), ("same time", 2), ("in the past", 2), ("later", 6)]
    assert clock.next_event_time() == 50


def test_virtual_clock_never_goes_backwards():
    clock = VirtualClock(100)
    clock.advance_to(100)  # standing still is fine
    with pytest.raises(ValueError, match="back"):
        clock.advance_to(99)
    assert clock.now() == 100


def test_step_runs_everything_due_at_the_next_event():
    clock = VirtualClock(0)
    log = []
    clock.call_at(7, recorder(log, "x", clock))
    clock.call_at(7, lambda: clock.call_at(7, recorder(log, "chained", clock)))
    clock.call_at(9, recorder(log, "y", clock))
    assert clock.step() == 7
    assert log == [("x", 7), ("chained", 7)]
    assert clock.now() == 7
    assert clock.step() == 9
    assert clock.step() is None
    assert clock.now() == 9


def test_sleep_until_advances_at_once_and_fires_due_callbacks():
    clock = VirtualClock(0)
    log = []
    clock.call_at(30, recorder(log, "due", clock))
    clock.call_at(90, recorder(log, "not yet", clock))
    started = time.monotonic()
    clock.sleep_until(60)
    assert time.monotonic() - started < 0.5
    assert clock.now() == 60
    assert log == [("due", 30)]
    clock.sleep_until(10)  # already past: returns without moving back
    assert clock.now() == 60
    past = clock.call_at(1, recorder(log, "past", clock))
    assert past.time == 60  # runs at the next opportunity
    clock.sleep_until(60)
    assert log[-1] == ("past", 60)


def test_callbacks_cannot_move_the_virtual_clock_and_errors_propagate():
    clock = VirtualClock(0)
    clock.call_at(1, lambda: clock.advance_to(5))
    with pytest.raises(RuntimeError, match="cannot move"):
        clock.advance_to(3)
    assert clock.now() == 1
    clock.advance_to(3)  # the clock is usable again afterwards
    assert clock.now() == 3


def test_clocks_share_the_interface():
    assert isinstance(VirtualClock(0), Clock)
    with WallClock() as wall:
        assert isinstance(wall, Clock)
        assert abs(wall.now() - time.time()) <= 2


def test_wall_clock_fires_in_platform_time_with_speedup():
    with WallClock(speedup=1000.0, origin=5_000) as clock:
        fired = threading.Event()
        seen = []
        real = time.monotonic()  # before ``start``: a pause between the two cannot shorten it
        start = clock.now()
        assert 5_000 <= start < 5_050
        clock.call_at(start + 2, lambda: (seen.append(clock.now()), fired.set()))
        assert fired.wait(timeout=1.0)  # 2 s of platform time, not of real time
        assert seen[0] >= start + 2
        clock.sleep_until(start + 200)  # 0.2 real seconds at 1000x
        assert clock.now() >= start + 200
        assert time.monotonic() - real >= 0.19


def test_wall_clock_orders_callbacks_and_survives_exceptions(caplog):
    log = []
    done = threading.Event()

    def boom():
        raise RuntimeError("boom")

    with WallClock(speedup=1000.0, origin=0) as clock:
        t = clock.now()
        # A second of real time between the first and the last registration's times: on a loaded
        # machine the registrations themselves take a while.
        clock.call_at(t + 3000, lambda: (log.append("third"), done.set()))
        clock.call_at(t + 1000, lambda: log.append("first"))
        clock.call_at(t + 2000, boom)
        clock.call_at(t + 2000, lambda: log.append("second"))
        clock.call_at(t + 2500, lambda: log.append("cancelled")).cancel()
        clock.call_at(t - 100, lambda: log.append("past"))
        with caplog.at_level(logging.ERROR):
            assert done.wait(timeout=30)  # a failsafe: at 1000x, 3 s
    assert log == ["past", "first", "second", "third"]
    assert any("boom" in (r.exc_text or "") for r in caplog.records)


def test_close_stops_the_thread():
    clock = WallClock(speedup=1000.0)
    assert clock.thread is None  # started lazily
    late = []
    clock.call_at(clock.now() + 100_000, lambda: late.append(True))
    thread = clock.thread
    assert thread is not None
    assert thread.is_alive()
    clock.close()
    thread.join(timeout=30)  # a failsafe: it ends at once
    assert not thread.is_alive()
    assert late == []
    with pytest.raises(RuntimeError, match="closed"):
        clock.call_at(clock.now(), lambda: None)
