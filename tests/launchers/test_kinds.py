"""The application file's evolving and malleable kinds: what a user writes, and the plug-ins
(growth rules, task lists) that turn it into requests. Fast: no bridge."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.launchers.app import AppError, parse_app
from coorm_bridge.launchers.growth import DataSize, Reported, ReportError, create_rule
from coorm_bridge.launchers.launch import main
from coorm_bridge.launchers.plugins import PluginParamsError
from coorm_bridge.launchers.tasks import MAX_TASKS, create_task_list

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

COMPONENT = """
[[component]]
name = "code"
command = ["/bin/true"]
"""


def app(text: str) -> str:
    return textwrap.dedent(text) + COMPONENT


def test_the_shipped_examples_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", str(EXAMPLES / "amr" / "amr.toml")]) == 0
    assert "evolving, growth rule data" in capsys.readouterr().out
    assert main(["--check", str(EXAMPLES / "sweep" / "sweep.toml")]) == 0
    assert "malleable, task list grid" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('kind = "evolving"\n[growth]\nname = "data"\n', r"kind = 'evolving' needs a \[evolving\]"),
        (
            'kind = "evolving"\n[evolving]\npre_allocation = 4\nduration = 60\n',
            r"needs a \[growth\] table",
        ),
        ('kind = "malleable"\n[malleable]\ntask_time = 5\n', r"needs a \[tasks\] table"),
        ('[tasks]\nname = "grid"\n', r"\[tasks\] is for kind = 'malleable', not 'rigid'"),
        (
            'kind = "evolving"\n[evolving]\npre_allocation = 0\nduration = 60\n'
            '[growth]\nname = "data"\n',
            r"evolving\.pre_allocation",
        ),
        ('kind = "elastic"\n', r"kind: Input should be"),
    ],
)
def test_a_kind_without_its_tables_is_refused_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(AppError, match=message):
        parse_app(app(text))


def test_an_evolving_or_malleable_application_runs_one_component() -> None:
    text = app('kind = "malleable"\n[malleable]\ntask_time = 5\n[tasks]\nname = "grid"\n')
    with pytest.raises(AppError, match="runs one"):
        parse_app(text + COMPONENT.replace('"code"', '"other"'))


def test_bad_plug_in_parameters_name_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(
        app(
            'kind = "malleable"\n[malleable]\ntask_time = 5\n[tasks]\nname = "grid"\n'
            "[tasks.params]\nparameters = {}\nextra = 1\n"
        )
    )
    assert main(["--check", str(path)]) == 2
    said = capsys.readouterr().err
    assert str(path) in said
    assert "tasks.params.parameters" in said
    assert "tasks.params.extra" in said


def test_an_unknown_rule_lists_the_installed_ones(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="installed: data, reported"):
        create_rule("grow-fast", {})


def test_a_rule_shipped_with_the_application_is_found_next_to_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "myrule.py").write_text(
        "from pydantic import BaseModel\n"
        "class Double:\n"
        "    class Params(BaseModel):\n"
        "        pass\n"
        "    def __init__(self, params): pass\n"
        "    def next_hosts(self, report, hosts): return 2 * hosts\n"
    )
    path = tmp_path / "amr.toml"
    path.write_text(
        app(
            'kind = "evolving"\n[evolving]\npre_allocation = 4\nduration = 60\n'
            '[growth]\nname = "myrule:Double"\n'
        )
    )
    assert main(["--check", str(path)]) == 0
    assert "growth rule myrule:Double" in capsys.readouterr().out


@given(
    size=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    per_host=st.floats(min_value=0.01, max_value=1e3, allow_nan=False),
)
def test_the_data_rule_gives_just_enough_hosts(size: float, per_host: float) -> None:
    rule = DataSize(DataSize.Params(per_host=per_host))
    hosts = rule.next_hosts({"data_size": size}, 1)
    assert hosts >= 1
    assert hosts * per_host >= size * (1 - 1e-9)
    assert hosts == 1 or (hosts - 1) * per_host < size * (1 + 1e-9) + per_host * 1e-9


@pytest.mark.parametrize("report", [{}, {"hosts": "4"}, {"hosts": True}, {"hosts": math.inf}])
def test_a_report_without_the_number_the_rule_reads_says_so(report: dict[str, object]) -> None:
    with pytest.raises(ReportError, match="'hosts'"):
        Reported(Reported.Params()).next_hosts(report, 2)


def test_the_grid_gives_every_combination_once_with_stable_ids() -> None:
    params = {"parameters": {"x": [1, 2, 3], "seed": ["a", "b"]}}
    tasks = create_task_list("grid", params)
    assert [t.id for t in tasks] == [f"t{n}" for n in range(1, 7)]
    assert {(t.params["x"], t.params["seed"]) for t in tasks} == {
        (x, s) for x in (1, 2, 3) for s in ("a", "b")
    }
    assert create_task_list("grid", params) == tasks


def test_a_grid_too_large_is_refused_before_anything_runs() -> None:
    side = math.isqrt(MAX_TASKS) + 1
    with pytest.raises(PluginParamsError, match="more than"):
        create_task_list("grid", {"parameters": {"a": list(range(side)), "b": list(range(side))}})
