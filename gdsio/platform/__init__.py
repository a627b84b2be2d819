"""Platform facts: NVIDIA libraries and the CUDA device (``nvidia``), GPUDirect
Storage (``gds``: nvidia-fs, P2PDMA, cufile.json, cuFile's state), file systems
and O_DIRECT (``filesystems``), the page cache (``pagecache``) and the machine
(``machine``: GPUs, PCIe, CPUs, packages). Facts only: the I/O policy that
uses them lives in gdsio.io.

>>> from gdsio.platform import machine
>>> machine.describe_machine("/data")          # doctest: +SKIP
"""

from __future__ import annotations

from . import filesystems, gds, machine, nvidia, pagecache

__all__ = ["filesystems", "gds", "machine", "nvidia", "pagecache"]
