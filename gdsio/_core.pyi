"""Type stubs of the compiled core (private: use the gdsio package)."""

import enum
import os
from typing import Any, Sequence

built_with_cuda: bool
cuda_architectures: str

class BackendUnavailable(RuntimeError): ...

class File:
    def __init__(self, path: str | bytes) -> None: ...
    def size(self) -> int: ...
    def close(self) -> None: ...
    def register_cufile(self, device: int) -> None: ...
    def direct_io_refusal(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...

class Engine(enum.Enum):
    posix = ...
    pinned = ...
    cufile = ...
    cufile_batch = ...

class ReadResult:
    """What one read did: the backend that ran, bytes, seconds, threads,
    chunks, O_DIRECT, and why a better path (or O_DIRECT) was not used."""

    _fields: tuple[str, ...]
    backend: str
    nbytes: int
    seconds: float
    threads: int
    chunks: int
    direct_io: bool
    reason: str

class HostEngineReport:
    """The host stand-in for the copy engine: copies, slots refilled under a
    pending copy (0 when correct), the most copies queued at once, waits."""

    _fields: tuple[str, ...]
    copies: int
    reuse_violations: int
    max_queued: int
    waits: int

def read(
    file: File,
    engine: Engine,
    dst: Any,
    requests: Sequence[tuple[int, int, int]],
    *,
    threads: int,
    chunk_bytes: int,
    staging_buffers: int,
    direct_io: bool,
    stream: int = 0,
) -> ReadResult:
    """Reads [(dst_offset, size, file_offset), ...] into `dst`: one array every
    request writes into, or a sequence of arrays, one per request. Each is
    dense and writable, all on one device: host memory for posix, a CUDA
    device for pinned/cufile/cufile_batch (the device read into). A range
    outside its array, a wrong device or layout: ValueError naming dst (or
    dst[i], requests[i]) before any byte or CUDA call."""
def staged_read_host_engine(
    file: File,
    dst: Any,
    requests: Sequence[tuple[int, int, int]],
    *,
    threads: int,
    chunk_bytes: int,
    staging_buffers: int,
    direct_io: bool = False,
    copy_delay_us: int = 0,
) -> tuple[ReadResult, HostEngineReport]:
    """The pinned pipeline with the host stand-in for the copy engine (tests);
    `dst` and `requests` as read's, in host memory."""

class CudaStatus:
    _fields: tuple[str, ...]
    device_count: int
    runtime_version: int
    driver_version: int  # 0: no driver
    error: str  # why no device can be used

def cuda_status() -> CudaStatus: ...
def kernel_probe(device: int) -> str: ...
def cuda_stream_synchronize(stream: int, device: int) -> None: ...

class NvjpegError(RuntimeError): ...

def cuda_pointer_kind(array: Any) -> tuple[str, int]:
    """(kind, device) of an array's memory as the CUDA runtime sees it
    ("device", "host", "managed"); nothing is read or written there."""

class CufileStatus:
    _fields: tuple[str, ...]
    loaded: bool
    library: str
    driver_open: bool
    true_gds: bool
    mode: str
    reason: str
    version: int
    max_batch_io_size: int
    batch_timeout_ms: int
    use_pci_p2pdma: bool
    p2pdma_supported: bool

def cufile_load(path: str = "") -> CufileStatus: ...
def cufile_status(open_driver: bool = False, device: int = 0) -> CufileStatus: ...
def cufile_shutdown() -> None: ...
def cufile_register_buffer(buffer: Any) -> tuple[bool, str]:
    """Registers all of a dense, writable array of CUDA memory with cuFile, on
    its device; (ok, reason). ValueError naming buffer for host memory, a
    strided or empty array."""
def cufile_deregister_buffer(buffer: Any) -> None: ...
def cufile_registered_buffers() -> int: ...

class StagingPoolStats:
    _fields: tuple[str, ...]
    cached_buffers: int
    cached_bytes: int
    in_use_buffers: int
    limit_bytes: int

def staging_pool_stats() -> StagingPoolStats: ...

class StagingRing:
    """Pinned staging slots whose copies to device memory are queued on a stream
    (the remote readers receive ranged GETs into them); host_engine=True is the
    host stand-in used by tests without a GPU (copies into host memory)."""

    def __init__(self, slots: int, slot_bytes: int, *, device: int = 0, stream: int = 0,
                 host_engine: bool = False, copy_delay_us: int = 0, reserve_bytes: int = 0) -> None: ...
    def next(self) -> int: ...
    def buffer(self, k: int) -> memoryview: ...
    def copy(self, k: int, dst: Any, offset: int, n: int) -> None:
        """Queues the copy of slot k's first n bytes into `dst` at byte `offset`:
        a dense, writable array on the ring's device holding them (else
        ValueError naming dst); the ring keeps dst alive until the copy is done."""
    def drain(self) -> None: ...
    def close(self) -> None: ...
    @property
    def slot_bytes(self) -> int: ...
    @property
    def slots(self) -> int: ...
    def report(self) -> HostEngineReport: ...

def release_staging() -> None: ...
def pool_threads() -> int: ...

# csrc/bindings/files.cpp
_Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]

def file_sizes(paths: Sequence[_Path], *, threads: int) -> list[int]: ...
def read_paths(dst: Any, reads: Sequence[tuple[_Path, int, int, int]], *, threads: int) -> int:
    """Reads [(path, dst_offset, size, file_offset), ...] into `dst`, a dense,
    writable host array (each range inside it, else ValueError naming dst);
    returns the bytes read."""
def read_whole_file(path: _Path, *, max_bytes: int) -> Any: ...  # a 1-D uint8 numpy array, or the size (int)
def read_file_into(path: _Path, dst: Any, nbytes: int | None = None) -> int:
    """The first nbytes (default: all of dst's) of a file into `dst`, a dense,
    writable host array holding them; nbytes, or -1: the general path decides."""
def shutdown_pool() -> None: ...
def host_buffer(nbytes: int, *, huge_pages: bool) -> tuple[Any, bool]: ...  # (1-D uint8 numpy array, reused)
class HostPoolStats:
    _fields: tuple[str, ...]
    idle_bytes: int
    idle_blocks: int
    cap_bytes: int
    reuses: int
    maps: int

def host_pool_stats() -> HostPoolStats: ...
def host_pool_trim() -> int: ...

# ---- image decode (csrc/bindings/decode.cpp)
img_jobs_per_launch: int

jpeg_backends: tuple[str, str, str]

class Sample(enum.Enum):
    u8 = ...
    u16le = ...
    u16be = ...
    f32le = ...
    f32be = ...

class OutType(enum.Enum):
    uint8 = ...
    uint16 = ...
    float32 = ...

class Convert(enum.Enum):
    copy = ...
    replicate = ...
    luma = ...

def sample_bytes(sample: Sample) -> int: ...

class PixelJob:
    """One uncompressed image to decode: its source bytes and its output, viewed
    once (the job keeps both arrays alive)."""

    def __init__(
        self, *, src: Any, dst: Any, offset: int = 0, stride_c: int, stride_y: int, stride_x: int,
        src_channels: int, sample: Sample, convert: Convert, maxval: int = 0,
    ) -> None:
        """src: a dense uint8 array holding the samples from byte `offset` on (strides in samples);
        dst: a contiguous (channels, height, width) uint8, uint16 or float32 array on src's device,
        which gives the output's size and type. ValueError/TypeError naming the argument."""
    @property
    def src(self) -> Any: ...
    @property
    def dst(self) -> Any: ...
    offset: int
    src_bytes: int  # bytes of src from the first sample on
    height: int
    width: int
    stride_c: int
    stride_y: int
    stride_x: int
    src_channels: int
    dst_channels: int
    sample: Sample
    out: OutType
    convert: Convert
    maxval: int

def img_decode_pixels_cpu(jobs: list[PixelJob], *, threads: int) -> None:
    """Decodes the jobs (arrays in host memory) on the CPU; ValueError naming jobs[i] for a bad one."""
def img_decode_pixels_cuda(jobs: list[PixelJob], *, device: int, stream: int) -> int:
    """Queues the jobs (arrays on cuda:`device`) on `stream`; returns the kernel launches."""

class NvjpegStatus:
    _fields: tuple[str, ...]
    loaded: bool
    library: str
    version: tuple[int, int, int]
    cudart_version: tuple[int, int, int] | None
    reason: str

def nvjpeg_load(path: str = "") -> NvjpegStatus: ...
def nvjpeg_status() -> NvjpegStatus: ...
class NvjpegBackendProbe:
    _fields: tuple[str, ...]
    usable: bool
    reason: str
    fancy_upsampling_flag: bool

class NvjpegProbe:
    _fields: tuple[str, ...]
    hardware_engines: int
    hardware_cores: int
    backends: tuple[NvjpegBackendProbe, ...]  # in jpeg_backends' order

def nvjpeg_probe(device: int) -> NvjpegProbe: ...
def nvjpeg_hardware_supported(device: int, headers: list[bytes]) -> list[int]: ...
def nvjpeg_decode_batch(device: int, backend: str, output: str, jobs: Sequence[tuple[Any, Any]], stream: int) -> None:
    """One nvjpegDecodeBatched call over [(data, dst), ...]: data a dense uint8 bitstream (on cuda:`device`,
    on the host for nvjpeg-host), dst a contiguous uint8 (3, H, W) ('rgb') or (1, H, W) ('y') array on
    cuda:`device` of the image's size: nvJPEG's own size of each image (nvjpegGetImageInfo) is checked
    against dst's (H, W) before anything is decoded, and a job that differs is refused (ValueError)."""
def nvjpeg_release() -> bool: ...

# ---- transforms (csrc/bindings/transforms.cpp)
tf_max_images_per_launch: int
tf_max_pad_fill: int

def tf_cpu_simd() -> str: ...
def tf_set_cpu_simd(level: str) -> str: ...
def tf_vector_epilogue(
    channels: int,
    dtype: str = "float32",
    *,
    scale: bool = False,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> bool:
    """Whether the CPU resize writes this epilogue (float32, float16 or
    bfloat16) with its vector kernel at the current SIMD level (its table's
    256 values a channel given back bit for bit); False: a table lookup a
    value, the same bits."""
def tf_resize_workspace_bytes(
    images: Any, *, out_h: int, out_w: int, filter: str, antialias: bool, boxes: Any = None
) -> int:
    """Bytes of CUDA workspace tf_resize needs for these images (channel
    planes: pixel stride 1), each cropped to boxes[i] when given."""
def tf_resize_windows(
    images: Any, *, out_h: int, out_w: int, filter: str, antialias: bool, boxes: Any = None
) -> bytes:
    """The host's filter windows, int32 bytes laid out as the CUDA workspace (tests compare the two)."""
def tf_resize(
    images: Any,
    *,
    out: Any,
    filter: str,
    antialias: bool,
    boxes: Any = None,
    flips: Any = None,
    scale: bool = False,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    stream: int = 0,
    workspace: Any = None,
    threads: int = 1,
) -> None:
    """Resizes uint8 (C, H, W) images, a sequence of arrays of any strides (a
    (C, H, W) view of (H, W, C) memory on the CPU; channel planes on CUDA) or
    one (N, C, H, W) array, into `out`: a contiguous writable (N, C, out_h,
    out_w) array whose dtype (uint8, float32, float16, bfloat16) is the
    output's. boxes: (N, 4) int64 (top, left, height, width), each inside its
    image; flips: N bools (mirror left-right); scale to [0, 1], then (x - mean)
    / std. Runs on the arrays' device (all one): the CPU on `threads` threads,
    or CUDA on `stream` with `workspace` (a byte array of
    tf_resize_workspace_bytes, or a callable given that count returning one).
    A wrong device, dtype, shape, stride or size: ValueError naming the array."""
def tf_pad(
    src: Any,
    out: Any,
    *,
    left: int,
    top: int,
    right: int,
    bottom: int,
    mode: str,
    fill: list[int],
    stream: int = 0,
    threads: int = 1,
) -> None:
    """Pads the contiguous (..., C, H, W) or (H, W) `src` (1, 2, 4 or 8-byte
    elements) into the contiguous writable `out` of the padded shape, same dtype
    and device (CPU on `threads` threads, CUDA on `stream`); negative padding
    crops; fill holds the fill's bits per channel (or one value for all)."""

# ---- colour ops (csrc/bindings/color.cpp)
tf_color_ops: dict[str, int]

def tf_color_workspace_bytes(images: Any, ops: Any, factors: Any) -> int:
    """Bytes of CUDA workspace tf_color needs for these images and ops (the contrast sums and means)."""
def tf_color(
    images: Any,
    outs: Any,
    ops: Any,
    factors: Any,
    *,
    stream: int = 0,
    workspace: Any = None,
    threads: int = 1,
) -> None:
    """Runs each image's colour ops (codes tf_color_ops, up to 4 a row of the
    (N, 4) int32 `ops`, with the (N, 4) `factors`) into its output. images: (C,
    H, W) arrays of 1 or 3 channels and one dtype (uint8, float32, float16,
    bfloat16), rows of adjacent pixels, as a sequence or one (N, C, H, W) array;
    outs likewise, each contiguous, writable, of its image's shape and dtype.
    On the arrays' device: the CPU on `threads` threads, or CUDA on `stream`
    with `workspace` (a byte array of tf_color_workspace_bytes, or a callable
    given that count returning one). ValueError naming the array otherwise."""

# ---- JPEG on the CPU through libjpeg-turbo (csrc/bindings/jpeg_cpu.cpp) ----
def jpeg_cpu_available() -> bool: ...
def jpeg_cpu_version() -> str: ...
class JpegResult:
    _fields: tuple[str, ...]
    image_height: int
    image_width: int
    rows_decoded: int
    columns_decoded: int
    warning: str | None

def jpeg_cpu_decode(data: Any, top: int, left: int, out: Any, strict: bool = True) -> JpegResult:
    """The box of the JPEG in `data` (a dense uint8 host array) at (top, left) into `out`, a (height, width,
    channels) uint8 host array (channels 1 or 3, adjacent; pixels `channels` apart; rows any distance apart)."""
def jpeg_cpu_decode_many(jobs: Sequence[tuple[Any, int, int, Any, int, int]], *, threads: int,
                         strict: bool = True) -> list[str]:
    """jpeg_cpu_decode of each (data, top, left, out, image height, image width); per job '' or its error."""
def jpeg_cpu_decode_image(data: Any, rgb: bool, max_pixels: int, max_header_bytes: int, pooled_min: int,
                          huge_min: int) -> Any | None:
    """One whole JPEG in `data` (1-D uint8, host): a (C, H, W) uint8 numpy view of new (H, W, C) memory (the
    host pool's from `pooled_min` bytes), or None for what the batch steps decode otherwise or refuse."""
