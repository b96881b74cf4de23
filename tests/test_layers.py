"""The package's layers, as its imports draw them: dependencies point one way, from the core out.

core → adapters (interface) → store → placement → service → http → cli, with ``protocol`` (the
launcher protocol's bodies) and ``paths`` beside the core, the launchers on the protocol only,
the simulated batch system (``batchsim``) on the core alone, under the mock adapter and the
experiments only, and the experiments (``sim``) beside the service, on the policy, placement,
selectors, the simulated batch system and the mock.
Read from the installed package's source, every import counted (inside functions and
``TYPE_CHECKING`` blocks too): a wrong-way import fails here before it tangles the graph.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import coorm_bridge
import coorm_bridge.adapters
import coorm_bridge.launchers

#: Which layers each layer may import (besides itself and the package root's version).
ALLOWED = {
    "core": set(),
    "batchsim": {"core"},
    "paths": set(),
    "protocol": {"core"},
    "adapters": {"core"},
    "store": {"core"},
    "placement": {"core", "adapters", "store"},
    "service": {"core", "paths", "protocol", "adapters", "store", "placement"},
    "http": {"core", "paths", "protocol", "adapters", "store", "placement", "service", "web"},
    "launchers": {"core", "paths", "protocol"},
    # The pages, and the page server that reads the bridge as a launcher does.
    "web": {"core", "paths", "protocol", "launchers"},
    "cli": {
        "core",
        "paths",
        "protocol",
        "adapters",
        "store",
        "placement",
        "service",
        "http",
        "launchers",
        "web",
    },
    # coorm-sim: the policy, placement and selectors driven in virtual time (no store, no server).
    "sim": {"core", "paths", "protocol", "adapters", "placement", "launchers", "batchsim"},
}
#: Batch systems plug in through the entry-point group: nothing outside adapters/ names one.
CONCRETE_ADAPTERS = (
    "coorm_bridge.adapters.mock",
    "coorm_bridge.adapters.slurm",
    "coorm_bridge.adapters.oar",
)
#: The one exception: coorm-launch's deployer for a kind of batch system submits with that
#: adapter's command builders and parsers and the adapters' runners (never the daemon's side),
#: and only when a cluster of that kind is deployed on.
DEPLOYERS = "coorm_bridge.launchers.deploy."
#: And the experiments: they place applications through the mock adapter (an Adapter over the
#: simulated batch system, which they otherwise use directly).
SIMULATOR = "coorm_bridge.sim"
MOCK = "coorm_bridge.adapters.mock"
#: The simulated batch system: the mock adapter is the one adapter over it.
BATCHSIM = "coorm_bridge.batchsim"


def mock_may_import(module: str, target: str) -> bool:
    """Whether ``module`` is the mock adapter's and ``target`` the simulated batch system."""
    return (module == MOCK or module.startswith(f"{MOCK}.")) and layer_of(target) == "batchsim"


def deployer_may_import(module: str, target: str) -> bool:
    """Whether ``module`` is the deployer of one kind and ``target`` the adapters' interface,
    their runners, or that same kind's adapter."""
    if not module.startswith(DEPLOYERS):
        return False
    kind = module.removeprefix(DEPLOYERS)
    return target in ("coorm_bridge.adapters.base", "coorm_bridge.adapters.batch.runner") or (
        target == f"coorm_bridge.adapters.{kind}"
        or target.startswith(f"coorm_bridge.adapters.{kind}.")
    )


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    # v1's and v2's bodies, and what the pages read
    return "protocol" if parts[1] in ("protocol_v2", "protocol_web") else parts[1]


def package_modules() -> dict[str, Path]:
    """Every module of the installed package: name → source file."""
    roots = {
        "coorm_bridge": Path(coorm_bridge.__file__).parent,
        "coorm_bridge.adapters": Path(next(iter(coorm_bridge.adapters.__path__))),
        "coorm_bridge.launchers": Path(next(iter(coorm_bridge.launchers.__path__))),
    }
    found: dict[str, Path] = {}
    for prefix, root in roots.items():
        for path in root.rglob("*.py"):
            relative = path.relative_to(root).with_suffix("").parts
            if relative[0] in ("adapters", "launchers") and prefix == "coorm_bridge":
                continue  # in an editable install these are the mapped folders, seen above
            name = ".".join((prefix, *relative)).removesuffix(".__init__")
            found[name] = path
    return found


def imports_of(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
    return {name for name in names if name.split(".")[0] == "coorm_bridge"}


def test_the_package_has_the_layers_it_claims():
    layers = {layer_of(name) for name in package_modules()}
    assert layers >= set(ALLOWED) | {"root"}, f"layers found: {sorted(layers)}"
    assert layers <= set(ALLOWED) | {"root"}, f"a module outside every layer: {sorted(layers)}"


def test_imports_point_from_the_core_outwards():
    wrong = []
    for module, path in sorted(package_modules().items()):
        mine = layer_of(module)
        if mine == "root":
            continue
        for target in sorted(imports_of(path, module)):
            theirs = layer_of(target)
            if theirs in ("root", mine) or theirs in ALLOWED[mine]:
                continue
            if deployer_may_import(module, target) or mock_may_import(module, target):
                continue
            wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_layer_names_a_batch_system():
    named = [
        f"{module} imports {target}"
        for module, path in sorted(package_modules().items())
        if layer_of(module) != "adapters"
        for target in imports_of(path, module)
        if target.startswith(CONCRETE_ADAPTERS) and not deployer_may_import(module, target)
        if not (layer_of(module) == "sim" and target.startswith(MOCK))
    ]
    assert not named, "found outside adapters/, where only the registry should find them:\n" + (
        "\n".join(named)
    )


def test_the_simulated_batch_system_is_used_through_its_public_api():
    """The mock adapter, the experiments, the tests and the benchmarks import
    ``coorm_bridge.batchsim`` itself, never one of its modules: its parts may change."""
    root = Path(__file__).resolve().parent.parent
    scripts = {
        ".".join(path.relative_to(root).with_suffix("").parts): path  # not by stem: names repeat
        for folder in ("tests", "benchmarks")
        for path in (root / folder).rglob("*.py")
    }
    inside = [
        f"{module} imports {target}"
        for module, path in sorted({**package_modules(), **scripts}.items())
        if layer_of(module) != "batchsim"
        for target in sorted(imports_of(path, module))
        if target.startswith(f"{BATCHSIM}.")
    ]
    assert not inside, "the simulated batch system's modules imported from outside:\n" + (
        "\n".join(inside)
    )


def loaded_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"{statement}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "module", ["coorm_bridge.launchers.client", "coorm_bridge.launchers.application"]
)
def test_the_launcher_client_loads_no_numpy_no_server_no_adapter(module):
    loaded = loaded_by(f"import {module}")
    heavy = {"numpy", "fastapi", "uvicorn", "starlette", "apscheduler", "paramiko", "sqlite3"}
    assert not {name.split(".")[0] for name in loaded} & heavy
    ours = {name for name in loaded if name.startswith("coorm_bridge.")}
    assert {layer_of(name) for name in ours} <= {"core", "protocol", "paths", "launchers"}, ours
    assert "coorm_bridge.core.policy" not in ours
    assert "coorm_bridge.core.profile" not in ours


@pytest.mark.parametrize("module", ["coorm_bridge.store", "coorm_bridge.core.messages"])
def test_the_store_and_the_messages_do_not_need_the_policy(module):
    loaded = loaded_by(f"import {module}")
    assert "coorm_bridge.core.policy" not in loaded
    assert "numpy" not in loaded


def test_coorm_launch_starts_without_the_heavy_modules():
    """``coorm-launch --check`` and ``--help`` load no numpy, rich, HTTP client or SSH; the
    loop loads the client but nothing of the daemon, and SSH only to deploy on Slurm or OAR."""
    daemon = {"fastapi", "uvicorn", "starlette", "apscheduler", "sqlite3", "prometheus_client"}
    loaded = {name.split(".")[0] for name in loaded_by("import coorm_bridge.launchers.launch")}
    assert not loaded & (daemon | {"numpy", "rich", "requests", "paramiko"})
    loaded = {name.split(".")[0] for name in loaded_by("import coorm_bridge.launchers.session")}
    assert not loaded & (daemon | {"paramiko", "numpy"})
    loop = loaded_by("import coorm_bridge.launchers.session")
    assert not {"coorm_bridge.adapters.slurm", "coorm_bridge.adapters.oar"} & loop
