"""The tools on top of the library: the ``gdsio`` command (``cli``), ``doctor``
(why GDS is or is not used), ``demo`` (the main job, anywhere) and ``bench``
(the copy paths side by side). They use everything below; nothing below uses them.
"""

from __future__ import annotations

from . import bench, cli, demo, doctor

__all__ = ["bench", "cli", "demo", "doctor"]
