#include "io/cufile_shim.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/cuda_rt.hpp"
#include "core/dl.hpp"
#include "io/thread_pool.hpp"

namespace gdsio {

namespace cufile {
// CUfileOpError, the one table of it: each value's text, as cufileop_status_error() gives it.
constexpr struct {
  int err;
  const char* text;
} kOpErrors[] = {
    {0, "cufile success"},
    {5001, "nvidia-fs driver is not loaded (and compat mode is off)"},
    {5002, "invalid property"},
    {5003, "property range error"},
    {5004, "nvidia-fs driver version mismatch"},
    {5005, "nvidia-fs driver version read error"},
    {5006, "driver shutdown in progress"},
    {5007, "GPUDirect Storage not supported on current platform"},
    {5008, "GPUDirect Storage not supported on current file"},
    {5009, "GPUDirect Storage not supported on current GPU"},
    {5010, "nvidia-fs driver ioctl error"},
    {5011, "CUDA Driver API error"},
    {5012, "invalid device pointer"},
    {5013, "invalid pointer memory type"},
    {5014, "pointer range exceeds allocated address range"},
    {5015, "cuda context mismatch"},
    {5016, "access beyond maximum pinned size"},
    {5017, "access beyond mapped size"},
    {5018, "unsupported file type"},
    {5019, "unsupported file open flags"},
    {5020, "fd direct IO not set"},
    {5022, "invalid arguments"},
    {5023, "device pointer already registered"},
    {5024, "device pointer lookup failure"},
    {5025, "driver or file access error"},
    {5026, "driver is already open"},
    {5027, "file descriptor is not registered"},
    {5028, "file descriptor is already registered"},
    {5029, "GPU device not found"},
    {5030, "internal error"},
    {5031, "failed to obtain new file descriptor"},
    {5033, "NVFS driver initialization error"},
    {5034, "GPUDirect Storage disabled by config on current file"},
    {5035, "failed to submit batch operation"},
    {5036, "failed to allocate pinned GPU Memory"},
    {5037, "queue full for batch operation"},
    {5038, "cuFile stream operation not supported"},
    {5039, "batch setup internal error (retry later)"},
    {5040, "batch submit internal error (retry later)"},
    {5041, "batch get status internal error (retry later)"},
    {5042, "batch cancel internal error (retry later)"},
    {5043, "cufile no memory error (retry later)"},
    {5044, "cufile io error"},
    {5045, "cufile buffer registration error"},
    {5046, "cufile hash operation error"},
    {5047, "cufile invalid context error"},
    {5048, "nvfs internal driver error"},
    {5049, "compat mode off error"},
    {5050, "GPUDirect Storage max error"},
};

const char* op_error_string(int err) {
  for (const auto& row : kOpErrors)
    if (row.err == err) return row.text;
  return "unknown cufile error";
}
}  // namespace cufile

namespace {

using cufile::Error;

struct Api {
  void* lib = nullptr;
  Error (*DriverOpen)() = nullptr;
  Error (*DriverClose)() = nullptr;
  Error (*DriverGetProperties)(cufile::DrvProps*) = nullptr;
  Error (*HandleRegister)(cufile::Handle*, cufile::Descr*) = nullptr;
  void (*HandleDeregister)(cufile::Handle) = nullptr;
  Error (*BufRegister)(const void*, std::size_t, int) = nullptr;
  Error (*BufDeregister)(const void*) = nullptr;
  ssize_t (*Read)(cufile::Handle, void*, std::size_t, off_t, off_t) = nullptr;
  Error (*GetVersion)(int*) = nullptr;                       // optional
  Error (*GetParameterBool)(int, bool*) = nullptr;           // optional
  Error (*BatchIOSetUp)(cufile::BatchHandle*, unsigned) = nullptr;
  Error (*BatchIOSubmit)(cufile::BatchHandle, unsigned, cufile::IOParams*, unsigned) = nullptr;
  Error (*BatchIOGetStatus)(cufile::BatchHandle, unsigned, unsigned*, cufile::IOEvents*,
                            struct timespec*) = nullptr;
  Error (*BatchIOCancel)(cufile::BatchHandle) = nullptr;
  void (*BatchIODestroy)(cufile::BatchHandle) = nullptr;
};

// A wait for batched reads when the driver names no limit of its own.
constexpr unsigned kDefaultBatchTimeoutMs = 10000;

std::mutex g_mu;
Api g_api;
CufileStatus g_status;
bool g_driver_tried = false;
struct Registered {
  std::size_t size;
  int device;
};
std::map<const void*, Registered> g_registered;
int g_live_handles = 0;  // CufileHandles alive: the driver is not closed under them

using dl::sym;

std::string err_text(const Error& e) {
  std::string s = cufile::op_error_string(e.err);
  s += " (CUfileOpError " + std::to_string(e.err);
  if (e.err == cufile::kCudaDriverError) s += ", CUresult " + std::to_string(e.cu_err);
  return s + ")";
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "on" || s == "yes";
}

// After the driver opened: does cuFile move data by DMA, or in its compat mode
// (a POSIX read into its own bounce buffer, then a copy)?
void classify_mode_locked() {
  g_status.true_gds = false;  // decided afresh each time the driver opens
  bool forced = env_true("CUFILE_FORCE_COMPAT_MODE");
  bool b = false;
  if (!forced && g_api.GetParameterBool &&
      g_api.GetParameterBool(cufile::kParamForceCompatMode, &b).err == 0 && b)
    forced = true;
  if (forced) {
    g_status.mode = "cufile-compat";
    g_status.reason = "cuFile compat mode is forced (CUFILE_FORCE_COMPAT_MODE or force_compat_mode in cufile.json)";
    return;
  }
  cufile::DrvProps props{};
  const bool have_props = g_api.DriverGetProperties && g_api.DriverGetProperties(&props).err == 0;
  bool nvfs = ::access("/proc/driver/nvidia-fs/version", R_OK) == 0;
  if (have_props && props.nvfs.major_version > 0) nvfs = true;
  if (props.max_batch_io_size) g_status.max_batch_io_size = props.max_batch_io_size;
  if (props.max_batch_io_timeout_msecs) g_status.batch_timeout_ms = props.max_batch_io_timeout_msecs;
  g_status.use_pci_p2pdma =
      g_api.GetParameterBool && g_api.GetParameterBool(cufile::kParamUsePciP2pdma, &b).err == 0 && b;
  // use_pci_p2pdma only asks for P2PDMA: the driver's properties say whether
  // it can read that way here (what gdscheck prints as "P2PDMA: Supported").
  g_status.p2pdma_supported = have_props && (((props.fflags >> cufile::kFeatureP2pSupported) & 1u) ||
                                             ((props.nvfs.dstatusflags >> cufile::kDriverNvmeP2pSupported) & 1u));
  const bool p2p = g_status.use_pci_p2pdma && g_status.p2pdma_supported;
  if (nvfs || p2p) {
    g_status.mode = "gds";
    g_status.true_gds = true;
    g_status.reason = nvfs ? "" : "DMA through PCI P2PDMA (use_pci_p2pdma in cufile.json, and the driver supports it)";
  } else if (g_status.use_pci_p2pdma) {
    g_status.mode = "cufile-compat";
    g_status.reason =
        "use_pci_p2pdma is true in cufile.json, but the cuFile driver does not report PCI P2PDMA support "
        "(CU_FILE_P2P_SUPPORTED) and nvidia-fs is not loaded, so cuFile runs in its compat mode "
        "(POSIX read + copy)";
  } else {
    g_status.mode = "cufile-compat";
    g_status.reason =
        "the nvidia-fs driver is not loaded (/proc/driver/nvidia-fs is absent) and PCI P2PDMA "
        "is not enabled, so cuFile runs in its compat mode (POSIX read + copy)";
  }
}

}  // namespace

CufileStatus cufile_load(const std::string& path) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_status.loaded) return g_status;
  const dl::Opened opened = dl::open_first({path.empty() ? std::string("libcufile.so.0") : path});
  void* lib = opened.lib;
  const std::string& name = opened.name;
  if (!lib) {
    g_status.reason = "libcufile could not be loaded: " + opened.errors;
    return g_status;
  }
  Api a;
  a.lib = lib;
  bool ok = sym(lib, "cuFileDriverOpen", &a.DriverOpen) &&
            (sym(lib, "cuFileDriverClose_v2", &a.DriverClose) ||
             sym(lib, "cuFileDriverClose", &a.DriverClose)) &&
            sym(lib, "cuFileHandleRegister", &a.HandleRegister) &&
            sym(lib, "cuFileHandleDeregister", &a.HandleDeregister) &&
            sym(lib, "cuFileBufRegister", &a.BufRegister) &&
            sym(lib, "cuFileBufDeregister", &a.BufDeregister) && sym(lib, "cuFileRead", &a.Read);
  if (!ok) {
    g_status.reason = std::string("libcufile at ") + name + " lacks a required cuFile symbol";
    return g_status;
  }
  sym(lib, "cuFileDriverGetProperties", &a.DriverGetProperties);
  sym(lib, "cuFileGetVersion", &a.GetVersion);
  sym(lib, "cuFileGetParameterBool", &a.GetParameterBool);
  sym(lib, "cuFileBatchIOSetUp", &a.BatchIOSetUp);
  sym(lib, "cuFileBatchIOSubmit", &a.BatchIOSubmit);
  sym(lib, "cuFileBatchIOGetStatus", &a.BatchIOGetStatus);
  sym(lib, "cuFileBatchIOCancel", &a.BatchIOCancel);
  sym(lib, "cuFileBatchIODestroy", &a.BatchIODestroy);
  g_api = a;
  g_status.loaded = true;
  g_status.library = name;
  g_status.reason.clear();
  if (a.GetVersion) a.GetVersion(&g_status.version);
  return g_status;
}

CufileStatus cufile_status(bool open_driver, int device) {
  if (open_driver) {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      if (!g_status.loaded) {
        if (g_status.reason.empty()) g_status.reason = "libcufile was not loaded";
        return g_status;
      }
      if (g_driver_tried) return g_status;
    }
    // cuFile needs a CUDA context on the calling thread; the caller's device is restored.
    std::unique_ptr<DeviceGuard> guard;
    try {
      guard = std::make_unique<DeviceGuard>(device);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(g_mu);
      CufileStatus s = g_status;
      s.reason = std::string("cuFile needs a GPU: ") + e.what();
      return s;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_driver_tried) {
      g_driver_tried = true;
      Error e = g_api.DriverOpen();
      if (e.err != 0) {
        g_status.reason = "cuFileDriverOpen failed: " + err_text(e);
      } else {
        g_status.driver_open = true;
        if (!g_status.max_batch_io_size) g_status.max_batch_io_size = 128;
        classify_mode_locked();
        if (!g_status.batch_timeout_ms) g_status.batch_timeout_ms = kDefaultBatchTimeoutMs;
      }
    }
  }
  std::lock_guard<std::mutex> lk(g_mu);
  return g_status;
}

void cufile_shutdown() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_status.driver_open) {
    for (auto& [p, r] : g_registered) {
      try {
        DeviceGuard g(r.device);  // "APIs with GPU buffers should be called in a valid CUDA context"
        g_api.BufDeregister(p);
      } catch (...) {
        // The runtime is going away at exit: nothing left to give back.
      }
    }
    g_registered.clear();
    // A file still registered (a gdsio.File the program never closed) keeps the
    // driver open: closing it under a live handle makes the handle's later
    // deregistration a call into a closed driver. The process is exiting anyway.
    if (g_live_handles > 0) return;
    g_api.DriverClose();
    g_status.driver_open = false;
    g_driver_tried = false;
  }
}

namespace {
const Api& usable_api(int device) {
  CufileStatus s = cufile_status(true, device);
  if (!s.driver_open) throw Unavailable("cuFile is not usable here: " + s.reason);
  return g_api;
}
}  // namespace

CufileHandle::CufileHandle(FileHandle& f, int device) : device_(device) {
  const Api& api = usable_api(device);
  DeviceGuard guard(device);  // cuFile's calls want a CUDA context current
  cufile::Descr d{};
  d.type = cufile::kHandleTypeOpaqueFd;
  // GDS proper needs O_DIRECT; compat mode takes a buffered descriptor too.
  int fd = f.direct_fd();
  direct_ = fd >= 0;
  if (fd < 0) fd = f.fd();
  d.handle.fd = fd;
  if (!direct_) refusal_ = f.direct_io_refusal();
  {
    // Counted before it exists, so a shutdown meanwhile keeps the driver open for it.
    std::lock_guard<std::mutex> lk(g_mu);
    ++g_live_handles;
  }
  Error e = api.HandleRegister(&h_, &d);
  if (e.err != 0) {
    h_ = nullptr;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      --g_live_handles;
    }
    std::string why = "cuFileHandleRegister failed for '" + f.path() + "': " + err_text(e);
    if (!direct_) why += " (" + refusal_ + ")";
    // cuFile finds a file's block device through udev: in a container started
    // without /run/udev it refuses every file, compat mode included (the GPU
    // machine's log: "udev property not found"; KvikIO reads by POSIX there).
    if (::access("/run/udev", R_OK | X_OK) != 0)
      why += "; /run/udev is not readable here (a container started without --volume /run/udev:/run/udev:ro?), "
             "and cuFile finds a file's block device through udev";
    why += "; cuFile's log says why (cufile.log in the working directory, or $CUFILE_LOGFILE_PATH)";
    throw Unavailable(why);
  }
}

CufileHandle::~CufileHandle() {
  if (!h_) return;
  std::lock_guard<std::mutex> lk(g_mu);
  --g_live_handles;
  if (!g_status.driver_open) return;
  try {
    DeviceGuard guard(device_);
    g_api.HandleDeregister(h_);
  } catch (...) {
    // No usable device any more (at exit): nothing to give back.
  }
}

namespace {

// The registered buffer holding p, so reads pass (base, offset) as cuFile wants.
void* registered_base(void* p) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_registered.upper_bound(p);
  if (it == g_registered.begin()) return nullptr;
  --it;
  auto* b = static_cast<const char*>(it->first);
  if (static_cast<const char*>(p) < b + it->second.size) return const_cast<char*>(b);
  return nullptr;
}

// cuFileRead returns -1 with errno set, the negative of an errno, or the
// negative of a CUfileOpError (5000 and up).
[[noreturn]] void throw_read_error(const FileHandle& f, ssize_t r, std::uint64_t off) {
  if (r == -1 || (r < 0 && -r < cufile::kOpErrorBase))
    throw_errno(r == -1 ? errno : static_cast<int>(-r), f.path(),
                "cuFileRead failed at offset " + std::to_string(off));
  throw OsError(EIO, f.path(),
                detail::concat("cuFileRead failed at offset ", off, ": ",
                               cufile::op_error_string(static_cast<int>(-r)), " (", -r, ")"));
}

// GDS proper needs the file open with O_DIRECT; where the file system refused
// it, cuFile serves this file in its compat mode whatever the driver can do.
ReadResult start_result(const CufileStatus& s, const CufileHandle& h) {
  ReadResult res;
  res.backend = s.true_gds && h.direct() ? "gds" : "cufile-compat";
  res.reason = s.reason;
  if (s.true_gds && !h.direct())
    res.reason = "cuFile runs in its compat mode for this file: O_DIRECT was refused (" + h.direct_io_refusal() + ")";
  res.direct_io = h.direct();
  return res;
}

// cuFile writes into device memory when called, outside stream order: what the
// caller queued on its stream (kernels still reading the destination, a block
// the allocator reused) goes first. kvikio does the same before each cuFileRead.
void order_after_stream(const ReadOptions& opts) { cuda_stream_synchronize(opts.stream); }

}  // namespace

ReadResult cufile_read(FileHandle& f, CufileHandle& h, const std::vector<ReadRequest>& reqs,
                       const ReadOptions& opts_in) {
  const ReadOptions opts = checked(opts_in);
  const Api& api = usable_api(opts.device);
  DeviceGuard device(opts.device);  // the caller is reader 0; its device is restored after
  order_after_stream(opts);
  ReadResult res = start_result(cufile_status(false, opts.device), h);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Chunk> chunks = plan_chunks(reqs, opts.chunk_bytes);
  res.chunks = chunks.size();
  res.threads = std::min(opts.threads, std::max<std::size_t>(chunks.size(), 1));
  parallel_for(chunks.size(), opts.threads, [&](std::size_t, WorkQueue& q) {
    cuda_use_device(opts.device);  // cuFile needs the context current on this thread
    std::size_t i;
    while (q.claim(&i)) {
      const Chunk& c = chunks[i];
      void* base = registered_base(c.dst);
      if (!base) base = c.dst;
      off_t buf_off = static_cast<off_t>(c.dst - static_cast<char*>(base));
      std::size_t done = 0;
      while (done < c.len) {
        ssize_t r = api.Read(h.get(), base, c.len - done, static_cast<off_t>(c.file_offset + done),
                             buf_off + static_cast<off_t>(done));
        if (r < 0) {
          if ((r == -1 && errno == EINTR) || r == -EINTR) continue;
          throw_read_error(f, r, c.file_offset + done);
        }
        if (r == 0) throw_truncated(f.path(), c.file_offset, c.len, done);
        done += static_cast<std::size_t>(r);
      }
    }
  });
  for (const auto& r : reqs) res.nbytes += r.size;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

ReadResult cufile_read_batch(FileHandle& f, CufileHandle& h, const std::vector<ReadRequest>& reqs,
                             const ReadOptions& opts_in) {
  const ReadOptions opts = checked(opts_in);
  const Api& api = usable_api(opts.device);
  if (!api.BatchIOSetUp || !api.BatchIOSubmit || !api.BatchIOGetStatus || !api.BatchIODestroy)
    return cufile_read(f, h, reqs, opts);  // an old libcufile: the thread pool does it
  DeviceGuard device(opts.device);
  order_after_stream(opts);
  CufileStatus st = cufile_status(false, opts.device);
  ReadResult res = start_result(st, h);
  res.threads = 1;
  // Entries of at most chunk_bytes, as the threaded path reads (and never over
  // 1 GiB: compat mode reads with pread, which stops short of 2 GiB).
  constexpr std::size_t kMaxEntry = std::size_t{1} << 30;
  std::vector<ReadRequest> nonempty;
  for (const ReadRequest& r : reqs)
    if (r.size) nonempty.push_back(r);
  const std::vector<Chunk> entries = plan_chunks(nonempty, std::min(opts.chunk_bytes, kMaxEntry));
  // What cuFileRead reads after the batches: entries that timed out or were
  // cancelled, failed entries, the unread tails of short completions, and,
  // once a batch call itself failed, every entry not read yet. A failure of
  // the batch API is not the file's: as KvikIO's compat mode, the reads fall
  // back to cuFileRead, which raises only if it fails too.
  std::vector<ReadRequest> rest;
  std::size_t timed_out = 0, failed = 0, unbatched = 0;
  std::string first_failure, broken;  // the first failed entry; the batch call that failed
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t max_batch = std::max<unsigned>(1, st.max_batch_io_size);
  const unsigned timeout_ms = st.batch_timeout_ms ? st.batch_timeout_ms : kDefaultBatchTimeoutMs;
  auto reread = [&](std::size_t e, std::size_t* count) {
    const Chunk& c = entries[e];
    rest.push_back(ReadRequest{c.dst, c.len, c.file_offset});
    ++*count;
  };
  std::size_t first = 0;
  for (; first < entries.size(); first += max_batch) {
    const std::size_t n = std::min(max_batch, entries.size() - first);
    std::vector<cufile::IOParams> params(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Chunk& c = entries[first + i];
      void* base = registered_base(c.dst);
      if (!base) base = c.dst;
      params[i].mode = cufile::kBatchMode;
      params[i].u.batch.devPtr_base = base;
      params[i].u.batch.devPtr_offset = static_cast<off_t>(c.dst - static_cast<char*>(base));
      params[i].u.batch.file_offset = static_cast<off_t>(c.file_offset);
      params[i].u.batch.size = c.len;
      params[i].fh = h.get();
      params[i].opcode = cufile::kOpRead;
      params[i].cookie = reinterpret_cast<void*>(i);
    }
    cufile::BatchHandle b = nullptr;
    Error e = api.BatchIOSetUp(&b, static_cast<unsigned>(n));
    if (e.err != 0) {
      broken = "cuFileBatchIOSetUp failed: " + err_text(e);
      break;  // this batch and the ones after it: cuFileRead
    }
    // Cancelled unless every entry was accounted for, then destroyed, on every path.
    struct Destroy {
      const Api& a;
      cufile::BatchHandle b;
      bool done = false;
      ~Destroy() {
        if (!done && a.BatchIOCancel) a.BatchIOCancel(b);
        a.BatchIODestroy(b);
      }
    } destroy{api, b};
    e = api.BatchIOSubmit(b, static_cast<unsigned>(n), params.data(), 0);
    if (e.err != 0) {
      destroy.done = true;  // nothing was submitted: nothing to cancel
      broken = "cuFileBatchIOSubmit failed: " + err_text(e);
      break;
    }
    std::vector<cufile::IOEvents> events(n);
    std::vector<char> settled(n, 0);
    std::size_t completed = 0;
    while (completed < n) {
      const unsigned want = static_cast<unsigned>(n - completed);
      unsigned nr = want;
      timespec ts{static_cast<time_t>(timeout_ms / 1000), static_cast<long>(timeout_ms % 1000) * 1000000L};
      e = api.BatchIOGetStatus(b, want, &nr, events.data(), &ts);
      if (e.err != 0) {
        // What is left of this batch is cancelled (Destroy) before cuFileRead reads it again.
        broken = "cuFileBatchIOGetStatus failed: " + err_text(e);
        for (std::size_t i = 0; i < n; ++i)
          if (!settled[i]) reread(first + i, &unbatched);
        break;
      }
      std::size_t progressed = 0;
      for (unsigned k = 0; k < nr && k < want; ++k) {
        const auto i = reinterpret_cast<std::size_t>(events[k].cookie);
        if (i >= n || settled[i]) continue;
        const int status = events[k].status;
        if (status == cufile::kStatusWaiting || status == cufile::kStatusPending) continue;
        const Chunk& c = entries[first + i];
        const auto ret = static_cast<ssize_t>(events[k].ret);
        settled[i] = 1;
        ++progressed;
        if (status == cufile::kStatusTimeout || status == cufile::kStatusCanceled) {
          reread(first + i, &timed_out);  // the same bytes into the same place: a late completion changes nothing
          continue;
        }
        if (status != cufile::kStatusComplete || ret < 0) {
          if (first_failure.empty())
            first_failure = detail::concat(c.len, " bytes at offset ", c.file_offset, ": status ", status,
                                           ", returned ", ret,
                                           ret < 0 && -ret >= cufile::kOpErrorBase
                                               ? std::string(" (") + cufile::op_error_string(static_cast<int>(-ret)) + ")"
                                               : std::string());
          reread(first + i, &failed);
          continue;
        }
        if (static_cast<std::size_t>(ret) < c.len)  // short: cuFileRead finishes it, or finds the end of file
          rest.push_back(ReadRequest{c.dst + ret, c.len - static_cast<std::size_t>(ret),
                                     c.file_offset + static_cast<std::uint64_t>(ret)});
      }
      completed += progressed;
      if (progressed == 0 && completed < n) {
        // A whole timeout without progress: cancel what is left and read it with cuFileRead.
        if (api.BatchIOCancel) api.BatchIOCancel(b);
        for (std::size_t i = 0; i < n; ++i)
          if (!settled[i]) reread(first + i, &timed_out);
        break;
      }
    }
    if (!broken.empty()) {
      first += n;  // its unsettled entries are in `rest` already
      break;
    }
    destroy.done = true;
    res.chunks += n;
  }
  if (!broken.empty())
    for (std::size_t e = first; e < entries.size(); ++e) reread(e, &unbatched);
  if (!rest.empty()) {
    const ReadResult tail = cufile_read(f, h, rest, opts);
    res.chunks += tail.chunks;
    res.threads = std::max(res.threads, tail.threads);
  }
  std::vector<std::string> notes;
  if (timed_out) notes.push_back(detail::concat(timed_out, " batched cuFile reads timed out and were read with cuFileRead"));
  if (failed)
    notes.push_back(detail::concat(failed, " batched cuFile reads failed and were read with cuFileRead (the first: ",
                                   first_failure, ")"));
  if (!broken.empty())
    notes.push_back(detail::concat(broken, "; ", unbatched, " reads were made with cuFileRead instead"));
  for (const std::string& note : notes) res.reason = res.reason.empty() ? note : res.reason + "; " + note;
  for (const auto& r : reqs) res.nbytes += r.size;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

bool cufile_register_buffer(void* ptr, std::size_t n, int device, std::string* reason) {
  const Api& api = usable_api(device);
  DeviceGuard g(device);  // "APIs with GPU buffers should be called in a valid CUDA context"
  Error e = api.BufRegister(ptr, n, 0);
  if (e.err != 0) {
    if (reason) *reason = "cuFileBufRegister refused the buffer: " + err_text(e);
    return false;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_registered[ptr] = Registered{n, device};
  return true;
}

void cufile_deregister_buffer(void* ptr) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_registered.find(ptr);
  if (it == g_registered.end()) return;
  {
    DeviceGuard g(it->second.device);
    g_api.BufDeregister(ptr);
  }
  g_registered.erase(it);
}

std::size_t cufile_registered_buffers() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_registered.size();
}

}  // namespace gdsio
