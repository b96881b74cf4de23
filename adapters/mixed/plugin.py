"""``[adapter]`` with ``kind = "mixed"``: each system built by its own kind's plug-in.

Each system keeps whatever state it keeps (the simulated platform: its journal and its jobs'
folders) in a folder of its own in the daemon's state folder, ``systems/<kind>`` (the second
system of a kind ``systems/<kind>-2``, and so on), so that two systems never share a file, and a
system's state stays where it was when systems of other kinds are added or moved in the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from coorm_bridge.adapters.mixed.adapter import BatchSystem, MixedAdapter, close_all, system_label
from coorm_bridge.adapters.mixed.settings import MixedSettings
from coorm_bridge.adapters.registry import AdapterContext, AdapterPlugin, create_adapter
from coorm_bridge.core.batch import AdapterError, Misconfigured

#: The systems' state folders, in the daemon's.
SYSTEMS_FOLDER = "systems"


def state_folders(settings: MixedSettings) -> list[str]:
    """Each system's state folder name, in the order of the systems."""
    seen: Counter[str] = Counter()
    names = []
    for system in settings.systems:
        seen[system.kind] += 1
        count = seen[system.kind]
        names.append(system.kind if count == 1 else f"{system.kind}-{count}")
    return names


def create(settings: MixedSettings, context: AdapterContext) -> MixedAdapter:
    """Every system's adapter, in the file's order, then the site over them; what was built is
    closed again when a later part fails."""
    systems: list[BatchSystem] = []
    try:
        for index, (system, folder) in enumerate(
            zip(settings.systems, state_folders(settings), strict=True)
        ):
            state = context.state_dir / SYSTEMS_FOLDER / folder
            for private in (state.parent, state):  # a parents=True folder would not be
                private.mkdir(mode=0o700, exist_ok=True)
            try:
                adapter = create_adapter(system, replace(context, state_dir=state))
            except Misconfigured as error:  # a key of the system's table, in the site's
                raise error.under(f"system.{index}") from error
            except AdapterError as error:
                label = system_label(index, system.kind)
                raise AdapterError(f"{label}: {error}", cluster=error.cluster) from error
            systems.append(BatchSystem(index, system.kind, adapter))
        return MixedAdapter(systems, settings.links)
    except BaseException as error:
        try:
            close_all(system.adapter for system in systems)
        except Exception as closing:  # the first error is the one to tell
            error.add_note(f"closing the systems built before: {closing}")
        raise


PLUGIN = AdapterPlugin(kind="mixed", settings=MixedSettings, create=create)
