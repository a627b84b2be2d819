"""Tests of gdsio.platform: real probes on this machine plus fake procfs/sysfs trees."""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import sys

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsio.platform import filesystems, gds, machine, nvidia, pagecache

HAS_DEV_SHM = os.path.isdir("/dev/shm")
needs_dev_shm = pytest.mark.skipif(not HAS_DEV_SHM, reason="no /dev/shm on this machine")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _kernel_at_least(major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", platform.release())
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (major, minor)


# --------------------------------------------------------------------------- filesystems

MOUNTINFO = "\n".join([
    "22 27 0:21 / /proc rw,relatime - proc proc rw",
    "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard",
    r"40 27 259:1 / /gdsio-t/data rw,noatime shared:7 master:2 - xfs /dev/nvme0n1p1 rw,attr2",
    r"41 40 0:50 /sub /gdsio-t/data/my\040disk\011tab rw - fuse.sshfs me@host:/a\040b rw",
    r"42 27 0:51 / /gdsio-t/data\134x rw - tmpfs tmpfs rw",
    "43 27 0:52 / /gdsio-t/database rw - ext4 /dev/sdb rw",
    "44 40 0:53 / /gdsio-t/data rw - tmpfs over rw,size=4k",  # stacked on 40
    "this line is not mountinfo",
])


def test_parse_mountinfo_unescapes_and_skips_malformed_lines():
    entries = filesystems.parse_mountinfo(MOUNTINFO)
    assert len(entries) == 7
    fuse = entries[3]
    assert fuse.mount_point == "/gdsio-t/data/my disk\ttab"
    assert fuse.root == "/sub"
    assert fuse.fs_type == "fuse.sshfs"
    assert fuse.source == "me@host:/a b"
    assert entries[4].mount_point == "/gdsio-t/data\\x"
    xfs = entries[2]  # two optional fields before the "-"
    assert (xfs.fs_type, xfs.source, xfs.options, xfs.super_options, xfs.major_minor) == (
        "xfs", "/dev/nvme0n1p1", "rw,noatime", "rw,attr2", "259:1")


def _escape_like_the_kernel(name: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in name)


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
def test_mountinfo_escapes_round_trip(name):
    line = f"50 27 0:60 / /mnt/{_escape_like_the_kernel(name)} rw - ext4 /dev/x rw\n"
    [entry] = filesystems.parse_mountinfo("27 1 254:0 / / rw - ext4 /dev/vda rw\n" + line)[1:]
    assert entry.mount_point == "/mnt/" + name


@pytest.mark.parametrize(("path", "mount_point", "fs_type"), [
    ("/gdsio-t/data/my disk\ttab/f.bin", "/gdsio-t/data/my disk\ttab", "fuse.sshfs"),
    ("/gdsio-t/database/f.bin", "/gdsio-t/database", "ext4"),  # not under /gdsio-t/data
    ("/gdsio-t/data/f.bin", "/gdsio-t/data", "tmpfs"),  # the later of two stacked mounts
    ("/gdsio-t/data", "/gdsio-t/data", "tmpfs"),
    ("/gdsio-t/elsewhere", "/", "ext4"),
])
def test_filesystem_of_picks_longest_mount_prefix(tmp_path, path, mount_point, fs_type):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)
    fs = filesystems.filesystem_of(path, mountinfo=str(mountinfo))
    assert (fs["path"], fs["mount_point"], fs["fs_type"], fs["reason"]) == (
        path, mount_point, fs_type, None)


def test_filesystem_of_says_why_without_mountinfo(tmp_path):
    fs = filesystems.filesystem_of("/", mountinfo=str(tmp_path / "missing"))
    assert fs["fs_type"] is None
    assert "not readable" in fs["reason"]


def test_filesystem_of_root_and_tmp_path(tmp_path):
    root = filesystems.filesystem_of("/")
    assert root["mount_point"] == "/" and root["fs_type"] and root["reason"] is None
    here = filesystems.filesystem_of(str(tmp_path))
    assert here["path"] == os.path.realpath(tmp_path)
    assert (here["path"] + "/").startswith(here["mount_point"].rstrip("/") + "/")
    assert here["fs_type"] and here["source"] and here["options"]


@needs_dev_shm
def test_filesystem_of_dev_shm_is_tmpfs():
    fs = filesystems.filesystem_of("/dev/shm")
    assert (fs["mount_point"], fs["fs_type"]) == ("/dev/shm", "tmpfs")


# --------------------------------------------------------------------------- O_DIRECT

def test_o_direct_probe_on_directory_leaves_nothing_behind(tmp_path):
    result = filesystems.o_direct_probe(str(tmp_path))
    assert result["fs_type"] == filesystems.filesystem_of(str(tmp_path))["fs_type"]
    if result["fs_type"] in ("ext4", "xfs", "btrfs"):  # block filesystems with direct I/O
        assert result == {"ok": True, "reason": None, "fs_type": result["fs_type"],
                          "path": str(tmp_path)}
    else:
        assert result["ok"] or "O_DIRECT" in result["reason"]
    assert os.listdir(tmp_path) == []


def test_o_direct_probe_on_file_and_missing_path(tmp_path):
    data = tmp_path / "f.bin"
    data.write_bytes(b"x" * 100)  # shorter than one block: the read is short, not an error
    assert filesystems.o_direct_probe(str(data))["ok"] is filesystems.o_direct_probe(str(tmp_path))["ok"]
    missing = filesystems.o_direct_probe(str(tmp_path / "nope"))
    assert missing["ok"] is False and "does not exist" in missing["reason"]


@needs_dev_shm
def test_o_direct_probe_on_tmpfs():
    result = filesystems.o_direct_probe("/dev/shm")
    assert result["fs_type"] == "tmpfs"
    if _kernel_at_least(6, 6):  # tmpfs gained O_DIRECT in Linux 6.6
        assert result["ok"] is True
    else:
        assert result["ok"] is False and "O_DIRECT" in result["reason"]


def test_o_direct_refusal_is_explained(tmp_path, monkeypatch):
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    before = _open_fds()
    result = filesystems.o_direct_probe(str(tmp_path))
    assert _open_fds() == before
    fs_type = filesystems.filesystem_of(str(tmp_path))["fs_type"]
    assert result["ok"] is False
    assert result["reason"] == (f"O_DIRECT refused by this filesystem ({fs_type}): "
                                "[Errno 22] Invalid argument")
    assert os.listdir(tmp_path) == []


def test_o_direct_probe_in_unwritable_directory(tmp_path, monkeypatch):
    def no_mkstemp(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(filesystems.tempfile, "mkstemp", no_mkstemp)
    result = filesystems.o_direct_probe(str(tmp_path))
    assert result["ok"] is False and "not writable" in result["reason"]


# --------------------------------------------------------------------------- GDS kernel side

def test_nvidia_fs_status_from_fake_proc(tmp_path):
    base = tmp_path / "driver" / "nvidia-fs"
    base.mkdir(parents=True)
    (base / "version").write_text("version: 2.17\n")
    (base / "stats").write_text("")
    assert gds.nvidia_fs_status(str(tmp_path), str(tmp_path)) == {
        "loaded": True, "version": "2.17", "stats_available": True, "reason": None}


def test_nvidia_fs_status_when_absent(tmp_path):
    status = gds.nvidia_fs_status(str(tmp_path), str(tmp_path))
    assert status["loaded"] is False and status["version"] is None
    assert "not loaded" in status["reason"]
    real = gds.nvidia_fs_status()
    assert real["loaded"] is (os.path.exists("/proc/driver/nvidia-fs/version")
                              or os.path.isdir("/sys/module/nvidia_fs"))


@pytest.mark.parametrize(("config", "expected"), [
    ("CONFIG_PCI=y\nCONFIG_PCI_P2PDMA=y\n", True),
    ("# CONFIG_PCI_P2PDMA is not set\n", False),
    ("CONFIG_PCI=y\n", False),
])
def test_p2pdma_from_fake_boot_config(tmp_path, config, expected):
    (tmp_path / f"config-{platform.release()}").write_text(config)
    result = gds.p2pdma_possible(boot_dir=str(tmp_path), proc_root=str(tmp_path))
    assert result["config_pci_p2pdma"] is expected
    assert result["config_source"] == str(tmp_path / f"config-{platform.release()}")
    assert (result["reason"] is None) is (expected and result["kernel_at_least_6_2"])


def test_p2pdma_unknown_without_config_and_real_machine(tmp_path):
    unknown = gds.p2pdma_possible(boot_dir=str(tmp_path), proc_root=str(tmp_path))
    assert unknown["config_pci_p2pdma"] is None and "not readable" in unknown["reason"]
    real = gds.p2pdma_possible()
    assert real["kernel"] == platform.release()
    assert real["config_pci_p2pdma"] in (True, False, None)


# --------------------------------------------------------------------------- cufile.json

CUFILE_JSON = r"""
{
    // comment with "quotes" and a trailing comma,
    "logging": { "dir": "/var/log//cufile", "level": "ERROR", },  /* block
    comment */
    "execution": {
        "parallel_io": true, // inline
        "max_io_threads": 4,
    },
    "properties": {
        "max_direct_io_size_kb": 16384,
        "allow_compat_mode": false,
        "use_pci_p2pdma": true,
        "note": "a // in a string and a \" quote /* not a comment */",
        "list": [1, 2, 3,],
    },
}
"""


@pytest.fixture
def clean_cufile_env(monkeypatch):
    for name in gds.CUFILE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_cufile_json_with_comments_and_trailing_commas(tmp_path, clean_cufile_env):
    path = tmp_path / "cufile.json"
    path.write_text(CUFILE_JSON)
    clean_cufile_env.setenv("CUFILE_ENV_PATH_JSON", str(path))
    clean_cufile_env.setenv("CUFILE_FORCE_COMPAT_MODE", "true")
    result = gds.cufile_json()
    assert result["error"] is None
    assert (result["path"], result["exists"]) == (str(path), True)
    assert result["settings"] == {"properties.allow_compat_mode": False,
                                  "properties.use_pci_p2pdma": True,
                                  "execution.parallel_io": True,
                                  "properties.max_direct_io_size_kb": 16384}
    assert result["env"] == {"CUFILE_ENV_PATH_JSON": str(path), "CUFILE_FORCE_COMPAT_MODE": "true"}


def test_relaxed_json_keeps_strings_intact():
    config = gds._relaxed_json_loads(CUFILE_JSON)
    assert config["logging"]["dir"] == "/var/log//cufile"
    assert config["properties"]["note"] == 'a // in a string and a " quote /* not a comment */'
    assert config["properties"]["list"] == [1, 2, 3]


def test_cufile_json_missing_and_broken(tmp_path, clean_cufile_env):
    clean_cufile_env.setenv("CUFILE_ENV_PATH_JSON", str(tmp_path / "none.json"))
    missing = gds.cufile_json()
    assert (missing["exists"], missing["settings"], missing["error"]) == (False, {}, None)
    broken = tmp_path / "broken.json"
    broken.write_text('{"properties": {"allow_compat_mode": tru')
    clean_cufile_env.setenv("CUFILE_ENV_PATH_JSON", str(broken))
    assert gds.cufile_json()["error"].startswith("JSONDecodeError")


# --------------------------------------------------------------------------- GPUs and PCIe

@pytest.mark.parametrize(("speed", "gen"), [
    ("2.5 GT/s PCIe", 1), ("5.0 GT/s PCIe", 2), ("8.0 GT/s PCIe", 3), ("16.0 GT/s PCIe", 4),
    ("32.0 GT/s PCIe", 5), ("64.0 GT/s PCIe", 6), ("16 GT/s", 4), ("Unknown", None), (None, None),
])
def test_pcie_gen_from_speed(speed, gen):
    assert machine._pcie_gen(speed) == gen


def test_pcie_table_maths():
    assert machine._link_gbps(4, 16) == 31.5  # the Gen4 x16 figure everyone quotes
    assert machine._link_gbps(5, 16) == 63.01
    assert machine._link_gbps(3, 8) == 7.88
    assert machine._link_gbps(None, 16) is None and machine._link_gbps(4, 0) is None
    assert sorted(machine.PCIE_GEN_BY_GTS.values()) == sorted(machine.PCIE_LANE_GBPS)


def _fake_gpu_tree(root, bdf_dir, bus_location, speeds):
    gpu = root / "proc" / "driver" / "nvidia" / "gpus" / bdf_dir
    gpu.mkdir(parents=True)
    (gpu / "information").write_text(
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t GPU-1234\n"
        f"Bus Location: \t {bus_location}\nDevice Minor: \t 0\n")
    device = root / "sys" / "bus" / "pci" / "devices" / "0000:1a:00.0"
    device.mkdir(parents=True)
    for name, value in speeds.items():
        (device / name).write_text(value + "\n")


def test_gpus_from_fake_procfs_and_sysfs(tmp_path):
    _fake_gpu_tree(tmp_path, "0000:1A:00.0", "0000:1A:00.0", {
        "current_link_speed": "2.5 GT/s PCIe", "current_link_width": "16",
        "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"})
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
        "(dvs-builder@U16-I2-C03-12-4)  Thu Jan 23 00:00:00 UTC 2025\nGCC version:  gcc 12\n")
    found = machine.gpus(str(tmp_path / "proc"), str(tmp_path / "sys"))
    assert len(found) == 1
    gpu = found[0]
    assert (gpu["bdf"], gpu["model"], gpu["uuid"], gpu["device_minor"]) == (
        "0000:1a:00.0", "NVIDIA H200", "GPU-1234", "0")
    pcie = gpu["pcie"]
    assert (pcie["current_gen"], pcie["current_link_width"], pcie["current_gbps"]) == (1, 16, 4.0)
    assert (pcie["max_gen"], pcie["max_link_width"], pcie["max_gbps"]) == (5, 16, 63.01)
    assert pcie["max_link_speed"] == "32.0 GT/s PCIe" and pcie["reason"] is None
    assert machine.driver_version(str(tmp_path / "proc"), str(tmp_path / "sys")) == "570.86.15"


def test_gpus_old_bus_location_and_missing_sysfs(tmp_path):
    # Older drivers write "bus.device"; sysfs attributes may be missing (containers).
    _fake_gpu_tree(tmp_path, "0", "0000:1a.00.0", {})
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.81  Wed Aug 17 22:24:07 PDT 2016\n")
    [gpu] = machine.gpus(str(tmp_path / "proc"), str(tmp_path / "sys"))
    assert gpu["bdf"] == "0000:1a:00.0"
    assert gpu["pcie"]["max_gen"] is None and "no PCIe link" in gpu["pcie"]["reason"]
    assert machine.driver_version(str(tmp_path / "proc"), str(tmp_path / "sys")) == "384.81"


def test_no_gpus_without_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    machine._nvidia_smi.cache_clear()
    try:
        assert machine.gpus(str(tmp_path), str(tmp_path)) == []
        assert machine.driver_version(str(tmp_path), str(tmp_path)) is None
        if not os.path.isdir("/proc/driver/nvidia/gpus"):
            assert machine.gpus() == [] and machine.driver_version() is None
    finally:
        machine._nvidia_smi.cache_clear()


def test_gpus_from_nvidia_smi_without_procfs(tmp_path, monkeypatch):
    """A container without /proc/driver/nvidia: nvidia-smi's view, its own link figures without sysfs."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '00000000:1A:00.0, NVIDIA H200, GPU-abc, 580.65.06, 1, 5, 16, 16'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    machine._nvidia_smi.cache_clear()
    try:
        (g,) = machine._gpus_from_smi(str(tmp_path / "sys"))
        assert g["bdf"] == "0000:1a:00.0" and g["model"] == "NVIDIA H200" and g["source"] == "nvidia-smi"
        p = g["pcie"]
        assert (p["current_gen"], p["max_gen"], p["max_link_width"], p["reason"]) == (1, 5, 16, None)
        assert p["max_gbps"] == round(3.938 * 16, 2)
        # A fake tree never asks this machine's nvidia-smi; the real one does where the driver's nodes are missing.
        assert machine.gpus(str(tmp_path / "proc"), str(tmp_path / "sys")) == []
        assert machine.driver_version(str(tmp_path / "proc"), str(tmp_path / "sys")) is None
        if not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/sys/module/nvidia"):
            assert machine.driver_version() == "580.65.06"
            assert [g["model"] for g in machine.gpus()] == ["NVIDIA H200"]
    finally:
        machine._nvidia_smi.cache_clear()


# --------------------------------------------------------------------------- host

def test_cpu_info():
    info = machine.cpu_info()
    assert info["logical_cpus"] == os.cpu_count()
    assert 1 <= info["usable_cpus"] <= info["logical_cpus"]
    assert info["mem_total_bytes"] > 0
    assert info["kernel"] == platform.release()
    assert info["python"] == platform.python_version()


# --------------------------------------------------------------------------- page cache

def _write_and_read(path, nbytes):
    path.write_bytes(os.urandom(nbytes))  # not fsynced: evict must cope with dirty pages
    path.read_bytes()


def test_page_cache_evict_on_disk_file(tmp_path):
    data = tmp_path / "cold.bin"
    _write_and_read(data, 8 << 20)
    assert pagecache.resident_fraction(str(data)) > 0.9
    # fadvise(DONTNEED) after fsync drops the pages on ext4/xfs, the filesystems here.
    assert pagecache.evict(str(data)) is True
    assert pagecache.resident_fraction(str(data)) < pagecache.EVICTED_BELOW


@needs_dev_shm
def test_page_cache_evict_says_no_on_tmpfs():
    shm = f"/dev/shm/gdsio-test-sysinfo-{os.getpid()}"
    try:
        with open(shm, "wb") as f:
            f.write(os.urandom(1 << 20))
        assert pagecache.evict(shm) is False  # tmpfs pages are the file: they can't be dropped
        assert pagecache.resident_fraction(shm) > 0.9
    finally:
        os.unlink(shm)


def test_resident_fraction_maps_big_files_in_windows(tmp_path, monkeypatch):
    data = tmp_path / "odd.bin"
    _write_and_read(data, (3 << 20) + 100)  # a partial last page and window
    whole = pagecache.resident_fraction(str(data))
    monkeypatch.setattr(pagecache, "_MAP_WINDOW", 1 << 20)
    assert pagecache.resident_fraction(str(data)) == whole > 0.9
    assert pagecache.evict(str(data)) is True


def test_page_cache_edge_cases(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert pagecache.resident_fraction(str(empty)) == 0.0
    assert pagecache.resident_fraction(str(tmp_path / "missing")) is None
    assert pagecache.evict(str(tmp_path / "missing")) is False
    assert pagecache.resident_fraction(str(tmp_path)) is None  # a directory can't be mapped


def test_page_cache_leaves_no_mapping(tmp_path):
    data = tmp_path / "mapped-once.bin"
    _write_and_read(data, 1 << 20)
    pagecache.resident_fraction(str(data))
    pagecache.evict(str(data))
    with open("/proc/self/maps") as f:
        assert str(data) not in f.read()


# --------------------------------------------------------------------------- packages and libraries

def test_python_packages(monkeypatch):
    versions = machine.python_packages()
    assert {"torch", "numpy", "cupy", "kvikio", "cuda-pathfinder", "nvidia-cufile",
            "nvidia-cufile-cu12", "nvidia-nvjpeg", "nvidia-nvjpeg-cu12", "pillow"} <= set(versions)
    assert versions["numpy"] == numpy.__version__
    monkeypatch.setitem(machine._PACKAGES, "ghost", ("gdsio-no-such-distribution",))
    assert machine.python_packages()["ghost"] is None


def test_find_nvidia_lib_rejects_unknown_name():
    with pytest.raises(ValueError, match="name must be one of"):
        nvidia.find_nvidia_lib("cublas")


def _mapped_text() -> str:
    with open("/proc/self/maps") as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(nvidia.NVIDIA_LIBS))
def test_find_nvidia_lib_on_this_machine_does_not_load(name):
    sonames = nvidia.NVIDIA_LIBS[name].sonames
    loaded_before = any(s in _mapped_text() for s in sonames)
    result = nvidia.find_nvidia_lib(name)
    assert set(result) == {"name", "found", "path", "how", "reason"}
    assert result["found"] is (result["path"] is not None) is (result["reason"] is None)
    if result["found"]:
        assert os.path.isfile(result["path"])
        assert result["how"] in ("cuda-pathfinder", "site-packages", "system")
    else:
        assert result["how"] is None and "install" in result["reason"]
    assert any(s in _mapped_text() for s in sonames) is loaded_before


@pytest.fixture
def no_pathfinder(monkeypatch):
    # None in sys.modules makes each import of these names raise ImportError.
    for module in ("cuda", "cuda.pathfinder", "cuda.pathfinder._dynamic_libs.lib_descriptor",
                   "cuda.pathfinder._dynamic_libs.search_steps"):
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(nvidia, "_loader_cache", dict)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    return monkeypatch


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")


def test_find_nvidia_lib_in_wheel_layouts(tmp_path, no_pathfinder):
    _touch(tmp_path / "nvidia" / "cu13" / "lib" / "libcufile.so.0")
    _touch(tmp_path / "nvidia" / "nvjpeg" / "lib" / "libnvjpeg.so.12")  # the CUDA 12 wheel
    no_pathfinder.setattr(nvidia, "_site_packages_dirs", lambda: [str(tmp_path)])
    assert nvidia.find_nvidia_lib("cufile") == {
        "name": "cufile", "found": True, "how": "site-packages", "reason": None,
        "path": str(tmp_path / "nvidia" / "cu13" / "lib" / "libcufile.so.0")}
    nvjpeg = nvidia.find_nvidia_lib("nvjpeg")
    assert nvjpeg["path"] == str(tmp_path / "nvidia" / "nvjpeg" / "lib" / "libnvjpeg.so.12")


def test_find_nvidia_lib_on_ld_library_path(tmp_path, no_pathfinder):
    _touch(tmp_path / "libnvjpeg.so.13")
    no_pathfinder.setattr(nvidia, "_site_packages_dirs", lambda: [])
    no_pathfinder.setenv("LD_LIBRARY_PATH", f"/gdsio-no-such-dir:{tmp_path}")
    result = nvidia.find_nvidia_lib("nvjpeg")
    assert (result["how"], result["path"]) == ("system", str(tmp_path / "libnvjpeg.so.13"))


def test_find_nvidia_lib_says_why_not(no_pathfinder):
    no_pathfinder.setattr(nvidia, "_site_packages_dirs", lambda: [])
    no_pathfinder.setitem(nvidia.NVIDIA_LIBS, "cufile", nvidia.NvidiaLib(
        ("libgdsio-absent.so.0",), ("nvidia/cu13/lib",), "nvidia-cufile"))
    result = nvidia.find_nvidia_lib("cufile")
    assert result["found"] is False and result["how"] is None
    assert "libgdsio-absent.so.0 not found" in result["reason"]
    assert "cuda-pathfinder is not installed" in result["reason"]
    assert result["reason"].endswith("install nvidia-cufile")


@pytest.fixture
def fake_public_pathfinder(tmp_path, monkeypatch):
    """A cuda.pathfinder with only a public find_nvidia_dynamic_lib (no private modules)."""
    package = tmp_path / "fakepf" / "cuda" / "pathfinder"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "def find_nvidia_dynamic_lib(name):\n"
        "    if name == 'nvjpeg':\n"
        "        raise RuntimeError('Failure finding libnvjpeg.so.13')\n"
        "    return '/opt/fake/lib' + name + '.so'\n")
    saved = {k: v for k, v in sys.modules.items() if k == "cuda" or k.startswith("cuda.")}
    for key in saved:
        del sys.modules[key]
    monkeypatch.syspath_prepend(str(tmp_path / "fakepf"))
    monkeypatch.setattr(nvidia, "_site_packages_dirs", lambda: [])
    monkeypatch.setattr(nvidia, "_loader_cache", dict)
    yield
    for key in [k for k in sys.modules if k == "cuda" or k.startswith("cuda.")]:
        del sys.modules[key]
    sys.modules.update(saved)


def test_find_nvidia_lib_uses_public_pathfinder_api(fake_public_pathfinder):
    assert nvidia.find_nvidia_lib("cufile")["path"] == "/opt/fake/libcufile.so"
    assert nvidia.find_nvidia_lib("cufile")["how"] == "cuda-pathfinder"
    nvjpeg = nvidia.find_nvidia_lib("nvjpeg")
    if not nvjpeg["found"]:
        assert "Failure finding libnvjpeg.so.13" in nvjpeg["reason"]


# --------------------------------------------------------------------------- no leaks, JSON

@pytest.mark.parametrize("probe", [
    filesystems.filesystem_of,
    filesystems.o_direct_probe,
    lambda p: filesystems.o_direct_probe(os.path.join(p, "data.bin")),
    lambda p: pagecache.resident_fraction(os.path.join(p, "data.bin")),
    lambda p: pagecache.evict(os.path.join(p, "data.bin")),
    lambda p: gds.nvidia_fs_status(),
    lambda p: gds.p2pdma_possible(),
    lambda p: gds.cufile_json(),
    lambda p: machine.gpus(),
    lambda p: machine.cpu_info(),
    lambda p: machine.python_packages(),
    lambda p: [nvidia.find_nvidia_lib(n) for n in nvidia.NVIDIA_LIBS],
    machine.describe_machine,
], ids=["filesystem_of", "o_direct_dir", "o_direct_file", "resident_fraction", "evict",
        "nvidia_fs", "p2pdma", "cufile_json", "gpus", "cpu_info", "packages", "find_libs",
        "describe_machine"])
def test_probes_leak_no_fds(tmp_path, probe):
    (tmp_path / "data.bin").write_bytes(b"y" * 10000)
    probe(str(tmp_path))  # the first call may open lasting handles (libc, caches)
    before = _open_fds()
    probe(str(tmp_path))
    assert _open_fds() == before


def test_describe_machine_is_json(tmp_path):
    report = machine.describe_machine(str(tmp_path))
    assert json.loads(json.dumps(report)) == report
    assert set(report) == {"cpu", "driver_version", "gpus", "nvidia_fs", "p2pdma", "cufile_json",
                           "python_packages", "nvidia_libs", "storage"}
    assert report["storage"]["filesystem"]["path"] == os.path.realpath(tmp_path)
    assert report["storage"]["o_direct"]["fs_type"] == report["storage"]["filesystem"]["fs_type"]
    assert "storage" not in machine.describe_machine()
