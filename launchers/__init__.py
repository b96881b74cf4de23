"""The launcher side of the protocol, installed as ``coorm_bridge.launchers``.

Selectors turn a view into a request; :mod:`coorm_bridge.launchers.selectors` defines the
interface and the built-in ones, registered in the ``coorm_bridge.selectors`` entry-point group.
"""
