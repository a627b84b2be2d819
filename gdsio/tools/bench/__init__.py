"""``gdsio bench``: every way of getting a file into memory, timed side by
side with the ceilings measured in the same run (see ``run``). ``paths``
holds the table of copy paths, ``report`` renders a run (text, markdown, plot).

>>> from gdsio.tools import bench
>>> doc = bench.run_bench(bench.BenchConfig(sizes=[1 << 20]))   # doctest: +SKIP
"""

from __future__ import annotations

from .run import *  # noqa: F403
from .run import __all__ as __all__
