"""The old name of :mod:`sparsetrain.datasets.synth_typed`, for one release: importing it warns.

``synthesize_hetero`` resolves to :func:`~sparsetrain.datasets.synth_typed.synthesize_typed` (warning again, with the
new name); the module's other names are :mod:`~sparsetrain.datasets.synth_typed`'s.
"""

from sparsetrain._deprecation import moved_attribute, renamed_module
from sparsetrain.datasets import synth_typed as _synth_typed

renamed_module(__name__, _synth_typed.__name__)

_RENAMED = {"synthesize_hetero": "sparsetrain.datasets.synth_typed:synthesize_typed"}


def __getattr__(name: str):
    if name in _RENAMED:
        return moved_attribute(__name__, _RENAMED, name)
    if not name.startswith("__") and hasattr(_synth_typed, name):
        return getattr(_synth_typed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
