"""The one place that decides whether long work shows a tqdm bar."""

import sys

from tqdm.auto import tqdm


def progress(total=None, desc: str = "", unit: str = "it", quiet: bool = False, **kwargs) -> tqdm:
    """A tqdm bar on stderr; silent when ``quiet`` or when stderr is not a terminal."""
    disable = quiet or not sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, unit_scale=True, dynamic_ncols=True, **kwargs)
