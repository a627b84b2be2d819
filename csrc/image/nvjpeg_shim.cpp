#include "image/nvjpeg_shim.hpp"

#include "core/cuda_rt.hpp"
#include "core/dl.hpp"
#include "core/error.hpp"

#ifdef GDSIO_WITH_CUDA

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#endif

namespace gdsio::image {

const char* jpeg_backend_name(JpegBackend b) {
  switch (b) {
    case JpegBackend::kHardwareDevice: return "nvjpeg-hardware-device";
    case JpegBackend::kGpuHybridDevice: return "nvjpeg-gpu-hybrid-device";
    case JpegBackend::kHost: return "nvjpeg-host";
  }
  return "nvjpeg-unknown";
}

#ifdef GDSIO_WITH_CUDA

namespace {

// The slice of nvjpeg.h (nvidia-nvjpeg 13.x, ABI-stable since 11.x) that gdsio
// uses, declared here so that the build needs no nvJPEG headers. Enums cross
// the C ABI as int.
namespace nvj {
using Status = int;
struct HandleSt;
using Handle = HandleSt*;
struct StateSt;
using State = StateSt*;
struct StreamSt;
using Stream = StreamSt*;  // nvjpegJpegStream_t
struct Image {  // nvjpegImage_t
  unsigned char* channel[4];
  std::size_t pitch[4];
};
static_assert(sizeof(Image) == 64, "nvjpegImage_t is 4 pointers and 4 size_t");
constexpr int kBackendDefault = 0;           // NVJPEG_BACKEND_DEFAULT
constexpr int kBackendGpuHybridDevice = 4;   // NVJPEG_BACKEND_GPU_HYBRID_DEVICE
constexpr int kBackendHardwareDevice = 5;    // NVJPEG_BACKEND_HARDWARE_DEVICE
constexpr unsigned kFlagHwDecodeNoPipeline = 1u;               // NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE
constexpr unsigned kFlagUpsamplingWithInterpolation = 1u << 5;  // NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
constexpr int kMajorVersion = 0, kMinorVersion = 1, kPatchLevel = 2;  // libraryPropertyType
constexpr int kMaxComponents = 4;  // NVJPEG_MAX_COMPONENT: nvjpegGetImageInfo's widths and heights

// nvjpegStatus_t, the one table of it: each value's name and whether it says
// "this bitstream (or this image with this backend)" rather than "the library
// or the GPU failed". The values are 0..10, so a status indexes its row.
struct StatusRow {
  Status code;
  const char* name;
  bool about_the_data;
};
constexpr StatusRow kStatuses[] = {
    {0, "NVJPEG_STATUS_SUCCESS", false},
    {1, "NVJPEG_STATUS_NOT_INITIALIZED", false},
    {2, "NVJPEG_STATUS_INVALID_PARAMETER", true},
    {3, "NVJPEG_STATUS_BAD_JPEG", true},
    {4, "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", true},
    {5, "NVJPEG_STATUS_ALLOCATOR_FAILURE", false},
    {6, "NVJPEG_STATUS_EXECUTION_FAILED", false},
    {7, "NVJPEG_STATUS_ARCH_MISMATCH", false},
    {8, "NVJPEG_STATUS_INTERNAL_ERROR", false},
    {9, "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED", true},
    {10, "NVJPEG_STATUS_INCOMPLETE_BITSTREAM", true},
};
constexpr int kStatusCount = static_cast<int>(sizeof(kStatuses) / sizeof(kStatuses[0]));
constexpr bool rows_in_order() {
  for (int i = 0; i < kStatusCount; ++i)
    if (kStatuses[i].code != i) return false;
  return true;
}
static_assert(rows_in_order(), "kStatuses[s] is the row of status s");
// The statuses the shim asks about by value.
constexpr Status kStatusNotInitialized = 1, kStatusInvalidParameter = 2, kStatusJpegNotSupported = 4,
                 kStatusArchMismatch = 7, kStatusImplementationNotSupported = 9;

const char* status_name(Status s) { return s >= 0 && s < kStatusCount ? kStatuses[s].name : "unknown nvJPEG status"; }

bool about_the_data(Status s) { return s >= 0 && s < kStatusCount && kStatuses[s].about_the_data; }
}  // namespace nvj

std::string status_text(nvj::Status s) { return detail::concat(nvj::status_name(s), " (", s, ")"); }

int nvjpeg_backend_enum(JpegBackend b) {
  switch (b) {
    case JpegBackend::kHardwareDevice: return nvj::kBackendHardwareDevice;
    case JpegBackend::kGpuHybridDevice: return nvj::kBackendGpuHybridDevice;
    default: return nvj::kBackendDefault;
  }
}

const char* nvjpeg_backend_enum_name(JpegBackend b) {
  switch (b) {
    case JpegBackend::kHardwareDevice: return "NVJPEG_BACKEND_HARDWARE_DEVICE";
    case JpegBackend::kGpuHybridDevice: return "NVJPEG_BACKEND_GPU_HYBRID_DEVICE";
    default: return "NVJPEG_BACKEND_DEFAULT";
  }
}

struct Api {
  void* lib = nullptr;
  nvj::Status (*GetProperty)(int, int*) = nullptr;
  nvj::Status (*GetCudartProperty)(int, int*) = nullptr;  // optional: the CUDA runtime it was built with
  nvj::Status (*CreateEx)(int, void*, void*, unsigned, nvj::Handle*) = nullptr;
  nvj::Status (*Destroy)(nvj::Handle) = nullptr;
  nvj::Status (*StateCreate)(nvj::Handle, nvj::State*) = nullptr;
  nvj::Status (*StateDestroy)(nvj::State) = nullptr;
  nvj::Status (*BatchedInitialize)(nvj::Handle, nvj::State, int, int, int) = nullptr;
  nvj::Status (*DecodeBatched)(nvj::Handle, nvj::State, const unsigned char* const*, const std::size_t*,
                               nvj::Image*, cudaStream_t) = nullptr;
  // (handle, data in host memory, length, components, subsampling, widths[4], heights[4])
  nvj::Status (*GetImageInfo)(nvj::Handle, const unsigned char*, std::size_t, int*, int*, int*, int*) = nullptr;
  // Optional: the hardware-support check.
  nvj::Status (*GetHardwareDecoderInfo)(nvj::Handle, unsigned*, unsigned*) = nullptr;
  nvj::Status (*StreamCreate)(nvj::Handle, nvj::Stream*) = nullptr;
  nvj::Status (*StreamDestroy)(nvj::Stream) = nullptr;
  nvj::Status (*StreamParseHeader)(nvj::Handle, const unsigned char*, std::size_t, nvj::Stream) = nullptr;
  nvj::Status (*BatchedSupported)(nvj::Handle, nvj::Stream, int*) = nullptr;
};

// A decoder state and the event recorded after its last decode: the next user
// of the state, maybe on another stream, waits for that event first, since
// the state's device buffers may still be in use.
struct PooledState {
  nvj::State state = nullptr;
  cudaEvent_t done = nullptr;
  int batch = -1;  // what nvjpegDecodeBatchedInitialize last set up: re-done only when it changes
  int output = -1;
  unsigned char* headers = nullptr;  // pinned: the first bytes of device bitstreams (DeviceHeaders)
  std::size_t header_bytes = 0;
};

// One backend on one device: its handle (thread-safe, shared) and a pool of
// decoder states (one per concurrent call).
struct Slot {
  bool tried = false;
  nvj::Handle handle = nullptr;
  bool fancy_flag = false;  // created with NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
  std::string reason;
  std::vector<PooledState> idle;
  int busy = 0;
};



struct DeviceSlots {
  Slot slot[kJpegBackends];
  unsigned engines = 0, cores = 0;
};

std::mutex g_mu;
Api g_api;
NvjpegStatus g_status;
std::map<int, DeviceSlots> g_devices;

void destroy(const PooledState& p) {
  if (p.state) g_api.StateDestroy(p.state);
  if (p.done) (void)cudaEventDestroy(p.done);
  if (p.headers) (void)cudaFreeHost(p.headers);
}

using dl::sym;

// DeviceGuard: gdsio::DeviceGuard (core/cuda_rt.hpp) makes `device` current and
// restores the caller's, which torch reads back.
using ::gdsio::DeviceGuard;

bool at_least(int major, int minor) {
  return g_status.major > major || (g_status.major == major && g_status.minor >= minor);
}

// Creates the handle of (device, backend) once; the device is current. Under g_mu.
Slot& slot_locked(int device, JpegBackend backend) {
  DeviceSlots& d = g_devices[device];
  Slot& s = d.slot[static_cast<int>(backend)];
  if (s.tried) return s;
  s.tried = true;
  unsigned flags = 0;
  // Without this flag the hardware backend may hold images back between calls
  // to pipeline them; gdsio wants each call's outputs complete in stream order.
  if (backend == JpegBackend::kHardwareDevice) flags |= nvj::kFlagHwDecodeNoPipeline;
  nvj::Handle h = nullptr;
  nvj::Status st = nvj::kStatusNotInitialized;
  // libjpeg's default ("fancy") chroma upsampling: nvJPEG 12.1 and later;
  // a backend that refuses the flag is created without it (and says so).
  if (at_least(12, 1)) {
    st = g_api.CreateEx(nvjpeg_backend_enum(backend), nullptr, nullptr, flags | nvj::kFlagUpsamplingWithInterpolation, &h);
    s.fancy_flag = st == 0 && h;
  }
  if (!s.fancy_flag) st = g_api.CreateEx(nvjpeg_backend_enum(backend), nullptr, nullptr, flags, &h);
  if (st != 0 || !h) {
    s.reason = detail::concat("nvjpegCreateEx(", nvjpeg_backend_enum_name(backend), ") failed on cuda:", device,
                              ": ", status_text(st));
    const bool no_engine = st == nvj::kStatusArchMismatch || st == nvj::kStatusImplementationNotSupported ||
                           st == nvj::kStatusJpegNotSupported;
    if (backend == JpegBackend::kHardwareDevice && no_engine)
      s.reason += " (this GPU has no hardware JPEG decoder, or this libnvjpeg does not drive it)";
    else if (st == nvj::kStatusInvalidParameter && backend != JpegBackend::kHost)
      s.reason += detail::concat(" (libnvjpeg ", g_status.major, ".", g_status.minor,
                                 " may predate the device-bitstream backends)");
    return s;
  }
  if (backend == JpegBackend::kHardwareDevice && g_api.GetHardwareDecoderInfo) {
    unsigned engines = 0, cores = 0;
    if (g_api.GetHardwareDecoderInfo(h, &engines, &cores) == 0) {
      d.engines = engines;
      d.cores = cores;
      if (engines == 0) {
        g_api.Destroy(h);
        s.reason = detail::concat("cuda:", device, " has no hardware JPEG decoder (nvjpegGetHardwareDecoderInfo: 0 engines)");
        return s;
      }
    }
  }
  s.handle = h;
  return s;
}

const Api& loaded_api() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_status.loaded)
    throw Unavailable("nvJPEG is not loaded: " + (g_status.reason.empty() ? std::string("nvjpeg_load was not called")
                                                                            : g_status.reason));
  return g_api;
}

// A decoder state checked out of the pool of (device, backend) for one call.
// The device is current for the whole life of a Checkout.
class Checkout {
 public:
  Checkout(int device, JpegBackend backend) : device_(device), backend_(backend) {
    std::lock_guard<std::mutex> lk(g_mu);
    Slot& s = slot_locked(device, backend);
    if (!s.handle)
      throw Unavailable(detail::concat(jpeg_backend_name(backend), " cannot run on cuda:", device, ": ", s.reason));
    handle_ = s.handle;
    if (!s.idle.empty()) {
      p_ = s.idle.back();
      s.idle.pop_back();
    } else {
      const nvj::Status st = g_api.StateCreate(handle_, &p_.state);
      if (st != 0 || !p_.state)
        throw NvjpegError(detail::concat("nvjpegJpegStateCreate (", jpeg_backend_name(backend), ", cuda:", device,
                                       ") failed: ", status_text(st)));
      const cudaError_t e = cudaEventCreateWithFlags(&p_.done, cudaEventDisableTiming);
      if (e != cudaSuccess) {
        destroy(p_);
        GDSIO_CUDA_CHECK(e, "cudaEventCreateWithFlags");
      }
    }
    ++s.busy;
  }
  ~Checkout() {
    std::lock_guard<std::mutex> lk(g_mu);
    Slot& s = g_devices[device_].slot[static_cast<int>(backend_)];
    --s.busy;
    // A state that saw a failure is not trusted again.
    if (discard_) destroy(p_);
    else s.idle.push_back(p_);
  }
  Checkout(const Checkout&) = delete;
  Checkout& operator=(const Checkout&) = delete;
  nvj::Handle handle() const { return handle_; }
  nvj::State state() const { return p_.state; }
  // nvjpegDecodeBatchedInitialize, when the batch size or output differ from the last call's.
  nvj::Status initialize(const Api& api, int batch, int output) {
    if (p_.batch == batch && p_.output == output) return 0;
    const nvj::Status st = api.BatchedInitialize(handle_, p_.state, batch, 1, output);
    if (st == 0) {
      p_.batch = batch;
      p_.output = output;
    }
    return st;
  }
  // Orders this use of the state after its previous one, on any stream. A host
  // wait: nvjpegDecodeBatchedInitialize wants "any currently running batched
  // decoding ... finished", and the host backend's CPU Huffman pass writes the
  // state's pinned buffer during the call, while the last call's copy from it may
  // be queued still (nvImageCodec and DALI wait on the host here too).
  void begin(cudaStream_t) {
    GDSIO_CUDA_CHECK(cudaEventSynchronize(p_.done), "cudaEventSynchronize (nvJPEG state)");
  }
  void end(cudaStream_t stream) { GDSIO_CUDA_CHECK(cudaEventRecord(p_.done, stream), "cudaEventRecord (nvJPEG state)"); }
  void discard() { discard_ = true; }
  // The state's pinned buffer of at least `n` bytes, or nullptr when pinned
  // memory cannot be had (the caller then copies into pageable memory).
  unsigned char* pinned_headers(std::size_t n) {
    if (p_.header_bytes >= n) return p_.headers;
    if (p_.headers) (void)cudaFreeHost(p_.headers);
    p_.headers = nullptr;
    p_.header_bytes = 0;
    void* h = nullptr;
    if (cudaHostAlloc(&h, n, cudaHostAllocDefault) != cudaSuccess || !h) {
      (void)cudaGetLastError();  // not sticky: nothing is left of the failed allocation
      return nullptr;
    }
    p_.headers = static_cast<unsigned char*>(h);
    p_.header_bytes = n;
    return p_.headers;
  }

 private:
  int device_;
  JpegBackend backend_;
  nvj::Handle handle_ = nullptr;
  PooledState p_;
  bool discard_ = false;
};

[[noreturn]] void throw_status(nvj::Status st, const char* call, JpegBackend backend, int device, std::size_t n) {
  const std::string where = detail::concat(call, " (", jpeg_backend_name(backend), ", cuda:", device, ", ", n,
                                           n == 1 ? " image)" : " images)");
  if (nvj::about_the_data(st)) throw ValueError("nvJPEG rejected the batch: " + where + ": " + status_text(st));
  throw NvjpegError("nvJPEG failed: " + where + ": " + status_text(st));
}

// How many first bytes of a JPEG hold its header up to the end of its first
// SOS segment: k <= have when p[0, have) holds them; k > have when at least
// k bytes are needed to tell; 0 when p is not a marker sequence this walk
// follows (nvJPEG is then given the whole bitstream, and judges it).
std::size_t jpeg_header_end(const unsigned char* p, std::size_t have) {
  if (have < 2) return 2;
  if (p[0] != 0xFF || p[1] != 0xD8) return 0;
  std::size_t pos = 2;
  for (;;) {
    if (pos + 2 > have) return pos + 2;
    if (p[pos] != 0xFF) return 0;
    const unsigned char m = p[pos + 1];
    if (m == 0xFF) {  // a fill byte before the marker
      ++pos;
      continue;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // TEM, RSTn: no length
      pos += 2;
      continue;
    }
    if (m == 0xD8 || m == 0xD9) return 0;  // SOI or EOI before any scan
    if (pos + 4 > have) return pos + 4;
    const std::size_t len = static_cast<std::size_t>(p[pos + 2]) << 8 | p[pos + 3];
    if (len < 2) return 0;
    pos += 2 + len;
    if (m == 0xDA) return pos;
  }
}

// The header of each device bitstream on the host, for nvjpegGetImageInfo
// (which parses host memory only). The first bytes of every image are copied
// into the state's pinned buffer, queued before the host wait that the device
// backends make anyway; a header longer than that (large APPn segments) is
// fetched again, at least twice as long each time, until its SOS is in.
class DeviceHeaders {
 public:
  // Up to this many first bytes an image in one batched round (less when the
  // batch is large: the pinned buffer stays within kBudget).
  static constexpr std::size_t kFirst = 8 << 10, kBudget = 16 << 20, kLeast = 64;

  // Queues the copies on `s`; they are complete once `s` is waited for.
  DeviceHeaders(Checkout& co, const std::vector<JpegJob>& jobs, cudaStream_t s) : jobs_(jobs), s_(s) {
    const std::size_t first = std::max(kLeast, std::min(kFirst, kBudget / jobs.size()));
    offsets_.resize(jobs.size() + 1);
    for (std::size_t i = 0; i < jobs.size(); ++i) offsets_[i + 1] = offsets_[i] + std::min(jobs[i].length, first);
    buf_ = co.pinned_headers(offsets_.back());
    if (!buf_) {  // pageable: each copy then waits for itself
      pageable_.resize(offsets_.back());
      buf_ = pageable_.data();
    }
    for (std::size_t i = 0; i < jobs.size(); ++i)
      GDSIO_CUDA_CHECK(cudaMemcpyAsync(buf_ + offsets_[i], jobs[i].data, offsets_[i + 1] - offsets_[i],
                                       cudaMemcpyDeviceToHost, s),
                       "cudaMemcpyAsync (the header of JPEG job ", i, " to the host)");
  }

  struct Header {
    const unsigned char* data;
    std::size_t length;
  };

  // Job i's header through its first SOS (its whole bitstream when `whole`,
  // or when the markers cannot be followed); `more` keeps what was fetched.
  Header get(std::size_t i, bool whole, std::vector<unsigned char>& more) const {
    const JpegJob& j = jobs_[i];
    Header h{buf_ + offsets_[i], offsets_[i + 1] - offsets_[i]};
    for (;;) {
      const std::size_t need = whole ? 0 : jpeg_header_end(h.data, h.length);
      if (need != 0 && need <= h.length) return {h.data, need};
      if (h.length >= j.length) return h;
      const std::size_t n = need == 0 ? j.length : std::min(j.length, std::max(need, 2 * h.length));
      more.resize(n);
      // Into pageable memory: returns once copied, ordered after the bitstream's writes on s.
      GDSIO_CUDA_CHECK(cudaMemcpyAsync(more.data(), j.data, n, cudaMemcpyDeviceToHost, s_),
                       "cudaMemcpyAsync (the header of JPEG job ", i, " to the host)");
      h = {more.data(), n};
    }
  }

 private:
  const std::vector<JpegJob>& jobs_;
  cudaStream_t s_;
  std::vector<std::size_t> offsets_;
  unsigned char* buf_ = nullptr;
  std::vector<unsigned char> pageable_;
};

// nvjpegDecodeBatched writes the image it parses through dst's pointers,
// whatever size the caller allocated: each job's dst must have the size
// nvJPEG itself finds (nvjpegGetImageInfo, component 0), or it is refused
// before anything is decoded. `headers`: the device bitstreams' headers on
// the host (nullptr for the host backend, whose bitstreams are host memory).
void check_sizes(const Api& api, nvj::Handle handle, JpegBackend backend, int device, const std::vector<JpegJob>& jobs,
                 const DeviceHeaders* headers) {
  std::vector<unsigned char> more;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JpegJob& j = jobs[i];
    int components = 0, subsampling = 0, widths[nvj::kMaxComponents] = {}, heights[nvj::kMaxComponents] = {};
    auto info = [&](const DeviceHeaders::Header& h) {
      return api.GetImageInfo(handle, h.data, h.length, &components, &subsampling, widths, heights);
    };
    DeviceHeaders::Header h = headers ? headers->get(i, false, more) : DeviceHeaders::Header{j.data, j.length};
    nvj::Status st = info(h);
    // A header alone may not do for this libnvjpeg: the whole bitstream decides.
    if ((st != 0 || widths[0] <= 0 || heights[0] <= 0) && h.length < j.length) {
      h = headers->get(i, true, more);
      st = info(h);
    }
    if (st != 0) {
      const std::string where =
          detail::concat("nvjpegGetImageInfo (", jpeg_backend_name(backend), ", cuda:", device, "): ", status_text(st));
      if (nvj::about_the_data(st))
        throw ValueError(detail::concat("jobs[", i, "]: nvJPEG rejected the bitstream: ", where));
      throw NvjpegError(detail::concat("jobs[", i, "]: nvJPEG failed: ", where));
    }
    GDSIO_EXPECT(widths[0] == j.width && heights[0] == j.height, ValueError, "jobs[", i, "]: the bitstream is ",
                 widths[0], "x", heights[0], " (nvjpegGetImageInfo), dst holds ", j.width, "x", j.height,
                 ": nvJPEG writes the bitstream's size, so dst must have it");
  }
}

}  // namespace

NvjpegStatus nvjpeg_load(const std::string& path) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_status.loaded) return g_status;
  const dl::Opened opened =
      dl::open_first(path.empty() ? std::vector<std::string>{"libnvjpeg.so.13", "libnvjpeg.so.12"}
                                  : std::vector<std::string>{path});
  void* lib = opened.lib;
  const std::string& loaded_from = opened.name;
  if (!lib) {
    g_status.reason = "libnvjpeg could not be loaded: " + opened.errors;
    return g_status;
  }
  Api a;
  a.lib = lib;
  const char* missing = nullptr;
  if (!sym(lib, "nvjpegGetProperty", &a.GetProperty)) missing = "nvjpegGetProperty";
  else if (!sym(lib, "nvjpegCreateEx", &a.CreateEx)) missing = "nvjpegCreateEx";
  else if (!sym(lib, "nvjpegDestroy", &a.Destroy)) missing = "nvjpegDestroy";
  else if (!sym(lib, "nvjpegJpegStateCreate", &a.StateCreate)) missing = "nvjpegJpegStateCreate";
  else if (!sym(lib, "nvjpegJpegStateDestroy", &a.StateDestroy)) missing = "nvjpegJpegStateDestroy";
  else if (!sym(lib, "nvjpegDecodeBatchedInitialize", &a.BatchedInitialize)) missing = "nvjpegDecodeBatchedInitialize";
  else if (!sym(lib, "nvjpegDecodeBatched", &a.DecodeBatched)) missing = "nvjpegDecodeBatched";
  else if (!sym(lib, "nvjpegGetImageInfo", &a.GetImageInfo)) missing = "nvjpegGetImageInfo";
  if (missing) {
    g_status.reason = "libnvjpeg at " + loaded_from + " lacks " + missing;
    return g_status;
  }
  sym(lib, "nvjpegGetCudartProperty", &a.GetCudartProperty);
  sym(lib, "nvjpegGetHardwareDecoderInfo", &a.GetHardwareDecoderInfo);
  sym(lib, "nvjpegJpegStreamCreate", &a.StreamCreate);
  sym(lib, "nvjpegJpegStreamDestroy", &a.StreamDestroy);
  sym(lib, "nvjpegJpegStreamParseHeader", &a.StreamParseHeader);
  sym(lib, "nvjpegDecodeBatchedSupported", &a.BatchedSupported);
  g_api = a;
  g_status = NvjpegStatus{};
  g_status.loaded = true;
  g_status.library = loaded_from;
  a.GetProperty(nvj::kMajorVersion, &g_status.major);
  a.GetProperty(nvj::kMinorVersion, &g_status.minor);
  a.GetProperty(nvj::kPatchLevel, &g_status.patch);
  if (a.GetCudartProperty) {
    a.GetCudartProperty(nvj::kMajorVersion, &g_status.cudart_major);
    a.GetCudartProperty(nvj::kMinorVersion, &g_status.cudart_minor);
    a.GetCudartProperty(nvj::kPatchLevel, &g_status.cudart_patch);
  }
  return g_status;
}

NvjpegStatus nvjpeg_status() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_status;
}

NvjpegDeviceInfo nvjpeg_probe(int device) {
  NvjpegDeviceInfo info;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_status.loaded) {
      const std::string why = "nvJPEG is not loaded: " + g_status.reason;
      for (auto& b : info.backends) b.reason = why;
      return info;
    }
  }
  DeviceGuard guard(device);
  std::lock_guard<std::mutex> lk(g_mu);
  for (int k = 0; k < kJpegBackends; ++k) {
    const Slot& s = slot_locked(device, static_cast<JpegBackend>(k));
    info.backends[k].usable = s.handle != nullptr;
    info.backends[k].reason = s.reason;
    info.backends[k].fancy_upsampling_flag = s.fancy_flag;
  }
  info.hardware_engines = g_devices[device].engines;
  info.hardware_cores = g_devices[device].cores;
  return info;
}

std::vector<int> nvjpeg_hardware_supported(int device, const std::vector<const std::uint8_t*>& headers,
                                           const std::vector<std::size_t>& lengths) {
  GDSIO_EXPECT(headers.size() == lengths.size(), ValueError, "headers and lengths differ in size");
  std::vector<int> out(headers.size(), -1);
  if (headers.empty()) return out;
  const Api& api = loaded_api();
  if (!api.StreamCreate || !api.StreamDestroy || !api.StreamParseHeader || !api.BatchedSupported) return out;
  DeviceGuard guard(device);
  nvj::Handle h = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    h = slot_locked(device, JpegBackend::kHardwareDevice).handle;
  }
  if (!h) return out;
  nvj::Stream js = nullptr;
  if (api.StreamCreate(h, &js) != 0 || !js) return out;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    if (!headers[i] || lengths[i] == 0) continue;
    if (api.StreamParseHeader(h, headers[i], lengths[i], js) != 0) continue;
    int unsupported = 1;  // nvJPEG's convention: 0 means "supported"
    if (api.BatchedSupported(h, js, &unsupported) == 0) out[i] = unsupported == 0 ? 1 : 0;
  }
  api.StreamDestroy(js);
  return out;
}

void nvjpeg_decode_batch(int device, JpegBackend backend, JpegOutput output, const std::vector<JpegJob>& jobs,
                         std::uintptr_t stream) {
  if (jobs.empty()) return;
  const int b = static_cast<int>(backend);
  GDSIO_EXPECT(b >= 0 && b < kJpegBackends, ValueError, "unknown nvJPEG backend ", b);
  GDSIO_EXPECT(output == JpegOutput::kY || output == JpegOutput::kRGB, ValueError, "unknown nvJPEG output ",
               static_cast<int>(output));
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JpegJob& j = jobs[i];
    GDSIO_EXPECT(j.data && j.length > 0, ValueError, "JPEG job ", i, ": empty bitstream");
    GDSIO_EXPECT(j.dst, ValueError, "JPEG job ", i, ": destination pointer is null");
    GDSIO_EXPECT(j.height >= 1 && j.width >= 1 && j.height <= 65535 && j.width <= 65535, ValueError, "JPEG job ",
                 i, ": bad size ", j.height, "x", j.width);
  }
  GDSIO_EXPECT(jobs.size() <= (1u << 20), ValueError, "too many JPEG jobs in one batch: ", jobs.size());
  const Api& api = loaded_api();
  DeviceGuard guard(device);  // before the checkout: its destructor needs the device current
  Checkout co(device, backend);
  const std::size_t n = jobs.size();
  std::vector<const unsigned char*> data(n);
  std::vector<std::size_t> lengths(n);
  std::vector<nvj::Image> dests(n);
  const int channels = output == JpegOutput::kRGB ? 3 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const JpegJob& j = jobs[i];
    data[i] = j.data;
    lengths[i] = j.length;
    nvj::Image im{};
    const std::size_t plane = static_cast<std::size_t>(j.height) * static_cast<std::size_t>(j.width);
    for (int c = 0; c < channels; ++c) {
      im.channel[c] = j.dst + c * plane;
      im.pitch[c] = static_cast<std::size_t>(j.width);
    }
    dests[i] = im;
  }
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  co.begin(s);
  // Both device backends read the bitstream outside stream order: the JPEG
  // engines read it (and write the outputs) when nvjpegDecodeBatched is
  // called, ahead of the work queued on `s` (torchcodec PR 1634, torchvision
  // PR 9606), and the GPU-hybrid backend parses it on the host from device
  // memory that the H2D copy (non_blocking) or the read queued on `s` may
  // still be writing. A device-side wait gates neither; a host wait does, as
  // torchvision's decode_jpegs_cuda waits before decoding. The engines' writes
  // are also waited for after the call, failed or not, so that no later kernel
  // on `s` reads an output they are writing, and no output Python frees for the
  // retry is written after it was reallocated. The device bitstreams' headers
  // go to the host for check_sizes behind the same wait.
  const bool engines = backend == JpegBackend::kHardwareDevice;
  std::unique_ptr<DeviceHeaders> headers;
  try {
    if (backend != JpegBackend::kHost) {
      headers = std::make_unique<DeviceHeaders>(co, jobs, s);  // copies the wait below completes
      const cudaError_t e = cudaStreamSynchronize(s);
      GDSIO_CUDA_CHECK(e, "cudaStreamSynchronize (before the nvJPEG ", jpeg_backend_name(backend), " decode)");
    }
    check_sizes(api, co.handle(), backend, device, jobs, headers.get());
  } catch (const CudaError&) {
    // A failed copy may leave others queued into the state's pinned buffer, and
    // nvjpegGetImageInfo's own failure (an NvjpegError) is nvJPEG's: not trusted again.
    co.discard();
    throw;
  }
  nvj::Status st = co.initialize(api, static_cast<int>(n), static_cast<int>(output));
  if (st != 0) {
    co.discard();
    throw_status(st, "nvjpegDecodeBatchedInitialize", backend, device, n);
  }
  st = api.DecodeBatched(co.handle(), co.state(), data.data(), lengths.data(), dests.data(), s);
  if (engines) {
    const cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) co.discard();  // its last use did not end cleanly: not trusted again
    GDSIO_CUDA_CHECK(e, "cudaStreamSynchronize (after the nvJPEG hardware decode",
                     st != 0 ? detail::concat(", which failed with ", status_text(st)) : std::string(), ")");
  }
  if (st != 0) {
    co.discard();
    throw_status(st, "nvjpegDecodeBatched", backend, device, n);
  }
  try {
    co.end(s);
  } catch (...) {
    co.discard();
    throw;
  }
}

bool nvjpeg_release() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_devices.empty()) return true;  // nothing created: leave the CUDA runtime untouched
  for (auto& [dev, d] : g_devices)
    for (auto& s : d.slot)
      if (s.busy) return false;
  int prev = -1;
  const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
  for (auto& [dev, d] : g_devices) {
    if (cudaSetDevice(dev) != cudaSuccess) continue;  // the runtime is gone: nothing left to free
    for (auto& s : d.slot) {
      for (const PooledState& p : s.idle) destroy(p);
      s.idle.clear();
      if (s.handle) g_api.Destroy(s.handle);
      s.handle = nullptr;
    }
  }
  g_devices.clear();
  if (have_prev) (void)cudaSetDevice(prev);
  (void)cudaGetLastError();
  return true;
}

#else  // !GDSIO_WITH_CUDA

namespace {
const char* kNoCuda = "gdsio was built without CUDA, so nvJPEG cannot be used";
}

NvjpegStatus nvjpeg_load(const std::string&) {
  NvjpegStatus s;
  s.reason = kNoCuda;
  return s;
}

NvjpegStatus nvjpeg_status() { return nvjpeg_load(""); }

NvjpegDeviceInfo nvjpeg_probe(int) { throw_no_cuda(); }

std::vector<int> nvjpeg_hardware_supported(int, const std::vector<const std::uint8_t*>&,
                                           const std::vector<std::size_t>&) {
  throw_no_cuda();
}

void nvjpeg_decode_batch(int, JpegBackend, JpegOutput, const std::vector<JpegJob>&, std::uintptr_t) {
  throw_no_cuda();
}

bool nvjpeg_release() { return true; }

#endif

}  // namespace gdsio::image
