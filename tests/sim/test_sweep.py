"""The sweep and ``coorm-sim`` on the toy experiment (tests/sim/simtoy.py), with the local
runner: merged order, resumption, refusals, failures, the command's exit statuses."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from coorm_bridge.sim import cli
from coorm_bridge.sim.progress import LogReporter
from coorm_bridge.sim.runners import LocalSweep, RunStatus
from coorm_bridge.sim.sweep import sweep

from .conftest import COORM_SIM, toy_environ

#: Seconds a wait may last before the test fails: a failsafe, each wait ends on its event.
FAILSAFE = 120


def run(marks: Path, out: Path, *options: str) -> int:
    return cli.main(["toy", "--marks", str(marks), "--out", str(out), *options])


def sim(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``coorm-sim ARGS`` in a child process, its output captured."""
    return subprocess.run(
        [str(COORM_SIM), *args], env=env, capture_output=True, text=True, check=False,
        timeout=timeout,
    )  # fmt: skip


def table(out: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO((out / "toy" / "toy.csv").read_text())))


def stored(out: Path) -> list[Path]:
    return sorted((out / "toy" / "runs").glob("*.json"))


def test_parallel_and_serial_sweeps_merge_to_the_same_csv(toy, marks, tmp_path):
    assert run(marks, tmp_path / "serial", "--jobs", "1") == 0
    assert run(marks, tmp_path / "parallel", "--jobs", "2") == 0
    serial = (tmp_path / "serial" / "toy" / "toy.csv").read_text()
    assert serial == (tmp_path / "parallel" / "toy" / "toy.csv").read_text()
    assert toy.executions(marks) == dict.fromkeys(range(12), 2)


def test_csv_columns_and_rows_follow_the_sorted_keys(toy, marks, tmp_path):
    assert run(marks, tmp_path, "--jobs", "2") == 0
    header, *rows = table(tmp_path)
    # first seen over the runs sorted by key: n=10 (ten) sorts before n=2 (two)
    assert header == ["run", "n", "i", "square", "ten", "two"]
    order = [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    expected = [(n, i) for n in order for i in range(1 + n % 2)]
    assert [(int(row[1]), int(row[2])) for row in rows] == expected
    assert [row[0] for row in rows] == [f"toy marks={marks} n={n}" for n, _ in expected]
    ten = next(row for row in rows if row[1] == "10")
    assert ten[4:] == ["True", ""]


def test_a_failing_run_is_named_the_others_stored_and_the_next_sweep_retries_it(
    toy, marks, tmp_path, capsys
):
    (marks / "fail-3").touch()
    assert run(marks, tmp_path, "--jobs", "2") == 1
    said = capsys.readouterr().err
    assert f"run failed: toy marks={marks} n=3: RuntimeError: toy failure 3" in said
    assert "1 of 12 runs failed" in said
    assert len(stored(tmp_path)) == 11
    assert not (tmp_path / "toy" / "toy.csv").exists()
    (trace,) = (tmp_path / "toy" / "runs").glob("*.error.txt")
    assert "Traceback" in trace.read_text()
    (marks / "fail-3").unlink()
    assert run(marks, tmp_path, "--jobs", "2") == 0
    assert "runs: 1 done now, 11 stored before" in capsys.readouterr().out
    assert toy.executions(marks) == {n: 2 if n == 3 else 1 for n in range(12)}
    assert not list((tmp_path / "toy" / "runs").glob("*.error.txt"))
    assert len(table(tmp_path)) == 1 + 18


def test_a_stored_run_of_another_key_is_refused(toy, marks, tmp_path, capsys):
    assert run(marks, tmp_path, "--jobs", "1", "--quick") == 0
    first = stored(tmp_path)[0]
    document = json.loads(first.read_text())
    document["key"] = "toy something else"
    first.write_text(json.dumps(document))
    capsys.readouterr()
    assert run(marks, tmp_path, "--jobs", "1", "--quick") == 1
    said = capsys.readouterr().err
    assert f"{first} holds the run 'toy something else'" in said
    assert "Traceback" not in said
    assert toy.executions(marks) == {0: 1, 1: 1, 2: 1}  # nothing ran
    assert run(marks, tmp_path, "--jobs", "1", "--quick", "--fresh") == 0
    assert toy.executions(marks) == {0: 2, 1: 2, 2: 2}


def test_a_worker_that_dies_fails_its_run_only(toy, marks, tmp_path):
    (marks / "exit-4").touch()
    args = argparse.Namespace(quick=False, count=6, marks=str(marks))
    specs = toy.Toy().plan(args)
    result = sweep("toy", specs, tmp_path / "toy", LocalSweep(2), reporter=LogReporter())
    assert [outcome.key for outcome in result.failures] == [f"toy marks={marks} n=4"]
    assert "BrokenProcessPool" in (result.failures[0].error or "")
    assert len(stored(tmp_path)) == 5
    # the runs the broken pool took down with it were redone, each in its own process
    assert toy.executions(marks)[4] == 2
    (marks / "exit-4").unlink()
    before = toy.executions(marks)
    again = sweep("toy", specs, tmp_path / "toy", LocalSweep(2), reporter=LogReporter())
    assert (again.ok, again.reused, again.executed) == (True, 5, 1)
    assert toy.executions(marks) == {**before, 4: 3}
    assert [row["n"] for row in again.rows] == [0, 1, 1, 2, 3, 3, 4, 5, 5]


def test_the_log_reporter_says_little():
    stream = io.StringIO()
    reporter = LogReporter(stream)
    reporter.start(100, 20)
    for n in range(80):
        reporter.finished(RunStatus(key=f"x n={n}", error="boom" if n == 7 else None))
    lines = stream.getvalue().splitlines()
    assert len(lines) <= 1 + 1 + 10
    assert lines[-1] == "coorm-sim: 100/100 runs ended, 1 failed"
    assert "coorm-sim: run failed: x n=7: boom" in lines


def test_help_needs_no_experiment_module(capsys):
    # the three experiments' modules are not in this branch: --help must not import them
    assert cli.main(["--help"]) == 0
    assert "scalability" in capsys.readouterr().out


def test_usage_errors_are_one_line(toy, marks, tmp_path, capsys):
    assert run(marks, tmp_path, "--jobs", "0") == 2
    assert "--jobs: must be at least 1" in capsys.readouterr().err
    afile = tmp_path / "a-file"
    afile.touch()
    assert run(marks, afile) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"coorm-sim: cannot use --out {afile}")
    assert said.count("\n") == 1
    assert run(marks, tmp_path, "--executor", "slurm", "--sbatch", "bad name=1") == 2
    assert "is not an sbatch option name" in capsys.readouterr().err


def test_coorm_sim_end_to_end(marks, tmp_path):
    env = toy_environ()
    out = tmp_path / "out"
    command = ["toy", "--quick", "--marks", str(marks), "--out", str(out)]
    done = sim(*command, "--jobs", "2", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out / 'toy' / 'toy.csv'}" in done.stdout
    assert f"wrote {out / 'toy' / 'toy-summary.txt'}" in done.stdout
    assert "toy: 4 rows, squares 6" in done.stdout
    assert "3/3 runs ended" in done.stderr  # plain lines: stderr is no terminal
    helped = sim("toy", "--help", env=env)
    assert helped.returncode == 0
    assert "--marks" in helped.stdout
    assert "--partition" in helped.stdout
    bad = sim(*command, "--executor", "nowhere", env=env)
    assert bad.returncode == 2


def test_ctrl_c_keeps_the_finished_runs_and_the_next_sweep_does_the_rest(toy, marks, tmp_path):
    # A run that sleeps 60 s: stopped by the Ctrl-C, or the sweep ends with it (and exits 0).
    # The child's SIGINT is at its default even when this test run ignores it (a background
    # job of a non-interactive shell): tests/conftest.py restores it.
    (marks / "sleep-0").write_text("60")
    out = tmp_path / "out"
    command = [str(COORM_SIM), "toy", "--count", "6", "--marks", str(marks), "--out", str(out)]
    env = toy_environ()
    child = subprocess.Popen(
        [*command, "--jobs", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + FAILSAFE
        while len(stored(out)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(stored(out)) == 5
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, said = child.communicate(timeout=FAILSAFE)  # it exits: at once, or after the run
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, said
    assert time.monotonic() - started < 10  # the sleeping run was stopped, not waited for
    assert "interrupted" in said
    assert "Traceback" not in said
    (marks / "sleep-0").unlink()
    again = sim(*command[1:], "--jobs", "2", env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "runs: 1 done now, 5 stored before" in again.stdout
    assert toy.executions(marks) == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    assert os.path.exists(out / "toy" / "toy.csv")


def test_without_srun_the_slurm_executor_says_so_before_anything(marks, tmp_path):
    env = toy_environ()
    env["PATH"] = str(COORM_SIM.parent)  # no Slurm client there
    command = ["toy", "--quick", "--marks", str(marks), "--out", str(tmp_path)]
    done = sim(*command, "--executor", "slurm", env=env)
    assert done.returncode == 1
    assert done.stderr == (
        'coorm-sim: no Slurm here: Could not detect "srun", are you indeed on a slurm cluster?\n'
    )
