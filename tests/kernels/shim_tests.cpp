// The CUDA call boundary checked on the CPU: gdsio's cuFile shim, nvJPEG shim
// and pinned pipeline (csrc/io, csrc/image), compiled as they are against the
// emulated runtime (emu_runtime.cpp), with stand-ins for libcufile and
// libnvjpeg (fakes/) that are dlopen'ed by path as the real ones are. What it
// checks is the order of the calls and what the shims do with the libraries'
// answers; what the real libraries do waits for the device.
//
// Usage: shim_tests FAKES_DIR SCENARIO   (one scenario a process: the shims
//        keep their state for the process, as in gdsio)
//        shim_tests --list
// Prints "shim SCENARIO: N checks, M failed" and exits 1 when any failed.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu_control.hpp"
#include "image/nvjpeg_shim.hpp"
#include "io/cufile_shim.hpp"
#include "io/file.hpp"
#include "io/pinned_reader.hpp"

namespace {

int g_checks = 0, g_failed = 0;

#define EXPECT(cond, ...)                                                                    \
  do {                                                                                       \
    ++g_checks;                                                                              \
    if (!(cond)) {                                                                           \
      ++g_failed;                                                                            \
      std::fprintf(stderr, "FAILED %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,              \
                   ::gdsio::detail::concat("", __VA_ARGS__).c_str());                        \
    }                                                                                        \
  } while (0)

std::string g_fakes;  // the folder of libfake_cufile.so and libfake_nvjpeg.so
const cudaStream_t kStream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x57ea4});
const std::string kStreamText = [] {
  char b[32];
  std::snprintf(b, sizeof b, "%p", static_cast<void*>(kStream));
  return std::string(b);
}();

// A fake library's control functions (the same handle the shim dlopen'ed).
struct Fake {
  void (*set)(const char*, long) = nullptr;
  long (*get)(const char*) = nullptr;
};
Fake fake(const std::string& lib, const char* set, const char* get) {
  void* h = dlopen((g_fakes + "/" + lib).c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) throw std::runtime_error(std::string("cannot open the fake ") + lib + ": " + dlerror());
  Fake f;
  f.set = reinterpret_cast<void (*)(const char*, long)>(dlsym(h, set));
  if (get) f.get = reinterpret_cast<long (*)(const char*)>(dlsym(h, get));
  if (!f.set || (get && !f.get)) throw std::runtime_error("the fake " + lib + " lacks its control functions");
  return f;
}

// Position of the first logged call starting with `prefix` at or after `from`; -1 when none.
long find_call(const std::vector<std::string>& calls, const std::string& prefix, long from = 0) {
  for (long i = std::max(from, 0L); i < static_cast<long>(calls.size()); ++i)
    if (calls[i].rfind(prefix, 0) == 0) return i;
  return -1;
}
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n    " + x;
  return s;
}

// A file of `n` bytes whose byte i is a function of i, in the working directory.
struct TestFile {
  std::string path;
  std::vector<unsigned char> bytes;
  explicit TestFile(std::size_t n, const std::string& name) : path(name), bytes(n) {
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || ::write(fd, bytes.data(), n) != static_cast<ssize_t>(n) || ::close(fd) != 0)
      throw std::runtime_error("cannot write " + path);
  }
  ~TestFile() { ::unlink(path.c_str()); }
};

// Emulated device memory (cudaMalloc: what cuda_pointer_kind calls "device").
struct DeviceBuffer {
  unsigned char* p = nullptr;
  std::size_t n;
  explicit DeviceBuffer(std::size_t size) : n(size) {
    void* v = nullptr;
    if (cudaMalloc(&v, n) != cudaSuccess) throw std::bad_alloc();
    p = static_cast<unsigned char*>(v);
    std::memset(p, 0xEE, n);
  }
  ~DeviceBuffer() { cudaFree(p); }
};

bool same_bytes(const unsigned char* got, const TestFile& f, std::uint64_t off, std::size_t n) {
  return std::memcmp(got, f.bytes.data() + off, n) == 0;
}

bool nvidia_fs_loaded() { return ::access("/proc/driver/nvidia-fs/version", R_OK) == 0; }

// ---- nvJPEG --------------------------------------------------------------------------------------

using gdsio::image::JpegBackend;
using gdsio::image::JpegJob;
using gdsio::image::JpegOutput;

void load_nvjpeg() {
  const auto st = gdsio::image::nvjpeg_load(g_fakes + "/libfake_nvjpeg.so");
  if (!st.loaded) throw std::runtime_error("the fake libnvjpeg did not load: " + st.reason);
}

// One 8x8 RGB job: the bitstream and the output in emulated device memory.
struct Job {
  DeviceBuffer bits{64}, out{3 * 8 * 8};
  std::vector<JpegJob> jobs() {
    JpegJob j;
    j.data = bits.p;
    j.length = bits.n;
    j.dst = out.p;
    j.height = j.width = 8;
    return {j};
  }
};

const char* kBackendEnum[] = {"5", "4", "0"};  // NVJPEG_BACKEND_* of JpegBackend 0, 1, 2

// Finding 7: the version of the libnvjpeg loaded, and the CUDA runtime it was built for.
void nvjpeg_version() {
  load_nvjpeg();
  const auto st = gdsio::image::nvjpeg_status();
  EXPECT(st.loaded && st.library == g_fakes + "/libfake_nvjpeg.so", st.library);
  EXPECT(st.major == 13 && st.minor == 0 && st.patch == 4, st.major, ".", st.minor, ".", st.patch);
  EXPECT(st.cudart_major == 13 && st.cudart_minor == 0 && st.cudart_patch == 88, st.cudart_major, ".",
         st.cudart_minor, ".", st.cudart_patch);
}

// Finding 2: both device-bitstream backends wait on the host for the stream
// (the bitstream's H2D copy) before nvjpegDecodeBatched; the host backend does not need to.
void nvjpeg_device_backends_wait_before_decoding() {
  load_nvjpeg();
  for (JpegBackend b : {JpegBackend::kHardwareDevice, JpegBackend::kGpuHybridDevice, JpegBackend::kHost}) {
    Job job;
    gdsio_emu::set_call_log(true);
    gdsio::image::nvjpeg_decode_batch(0, b, JpegOutput::kRGB, job.jobs(), reinterpret_cast<std::uintptr_t>(kStream));
    gdsio_emu::set_call_log(false);
    const auto calls = gdsio_emu::take_calls();
    const std::string name = gdsio::image::jpeg_backend_name(b);
    const long decode = find_call(calls, std::string("nvjpegDecodeBatched backend=") + kBackendEnum[int(b)]);
    const long sync = find_call(calls, "cudaStreamSynchronize " + kStreamText);
    EXPECT(decode >= 0, name, ": no decode call", joined(calls));
    if (b == JpegBackend::kHost) {
      EXPECT(sync < 0 || sync > decode, name, ": a needless host wait before the decode", joined(calls));
    } else {
      EXPECT(sync >= 0 && sync < decode, name, ": no host wait for the stream before the decode", joined(calls));
    }
    // The state's event is recorded on the caller's stream after the decode.
    EXPECT(find_call(calls, "cudaEventRecord", decode) > decode, name, joined(calls));
  }
  EXPECT(gdsio::image::nvjpeg_release(), "a decode still counted as in flight");  // as Python's atexit does
}

// Finding 3: a failed hardware decode still waits for the engines before it
// throws, so no output Python frees for the retry is written afterwards.
void nvjpeg_failed_hardware_decode_waits_before_throwing() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", nullptr);
  struct Want {
    int status;
    const char* error;  // the exception type expected
  };
  for (Want w : {Want{6, "NvjpegError"}, Want{3, "ValueError"}}) {
    nv.set("decode_status", w.status);
    Job job;
    gdsio_emu::set_call_log(true);
    std::string thrown;
    std::string what;
    try {
      gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHardwareDevice, JpegOutput::kRGB, job.jobs(),
                                        reinterpret_cast<std::uintptr_t>(kStream));
    } catch (const gdsio::image::NvjpegError& e) {
      thrown = "NvjpegError";
      what = e.what();
    } catch (const gdsio::ValueError& e) {
      thrown = "ValueError";
      what = e.what();
    }
    gdsio_emu::set_call_log(false);
    const auto calls = gdsio_emu::take_calls();
    EXPECT(thrown == w.error, "status ", w.status, ": threw '", thrown, "': ", what);
    EXPECT(what.find("nvjpegDecodeBatched (nvjpeg-hardware-device, cuda:0, 1 image)") != std::string::npos, what);
    const long decode = find_call(calls, "nvjpegDecodeBatched backend=5");
    const long after = find_call(calls, "cudaStreamSynchronize " + kStreamText, decode + 1);
    EXPECT(decode >= 0 && after > decode, "status ", w.status, ": no wait for the engines after the failed decode",
           joined(calls));
  }
  // A failed state is not reused: the next decode gets a fresh state and succeeds.
  nv.set("decode_status", 0);
  Job job;
  gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHardwareDevice, JpegOutput::kRGB, job.jobs(),
                                    reinterpret_cast<std::uintptr_t>(kStream));
  EXPECT(gdsio::image::nvjpeg_release(), "a decode still counted as in flight");
}

// Finding 6 (its C++ half): the probe says whether nvjpegCreateEx took the
// interpolated-upsampling flag, per backend; a backend refusing it is created without.
void nvjpeg_upsampling_flag_per_backend() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", nullptr);
  nv.set("refuse_upsampling_flag", 1 << 5);  // the hardware backend's enum
  const auto info = gdsio::image::nvjpeg_probe(0);
  EXPECT(info.backends[0].usable && !info.backends[0].fancy_upsampling_flag, info.backends[0].reason);
  EXPECT(info.backends[1].usable && info.backends[1].fancy_upsampling_flag, info.backends[1].reason);
  EXPECT(info.backends[2].usable && info.backends[2].fancy_upsampling_flag, info.backends[2].reason);
  EXPECT(info.hardware_engines == 1 && info.hardware_cores == 5, info.hardware_engines, " ", info.hardware_cores);
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// ---- cuFile ----------------------------------------------------------------------------------------

Fake load_cufile(const std::map<std::string, long>& cfg) {
  Fake cf = fake("libfake_cufile.so", "fake_cufile_set", "fake_cufile_get");
  for (const auto& [k, v] : cfg) cf.set(k.c_str(), v);
  const auto st = gdsio::cufile_load(g_fakes + "/libfake_cufile.so");
  if (!st.loaded) throw std::runtime_error("the fake libcufile did not load: " + st.reason);
  return cf;
}

// Finding 4: use_pci_p2pdma in cufile.json asks for P2PDMA; only the driver's
// properties say it happens. Each case is one process (the driver opens once).
void p2pdma_case(bool asked, long fflag, long legacy_flag, bool want_gds) {
  load_cufile({{"p2p_param", asked}, {"p2p_fflag", fflag}, {"p2p_flag", legacy_flag}});
  if (nvidia_fs_loaded()) {
    std::printf("shim: nvidia-fs is loaded here: cuFile does DMA through it, whatever P2PDMA says\n");
    want_gds = true;
  }
  const auto st = gdsio::cufile_status(true, 0);
  EXPECT(st.driver_open, st.reason);
  EXPECT(st.use_pci_p2pdma == asked, st.use_pci_p2pdma);
  EXPECT(st.p2pdma_supported == (fflag || legacy_flag), st.p2pdma_supported);
  EXPECT(st.true_gds == want_gds && st.mode == (want_gds ? "gds" : "cufile-compat"), st.mode, ": ", st.reason);
  if (asked && !want_gds && !nvidia_fs_loaded())
    EXPECT(st.reason.find("does not report PCI P2PDMA support") != std::string::npos, st.reason);
  // What a read reports: "gds" only for true GDS on an O_DIRECT descriptor.
  TestFile file(3 * 4096 + 17, "shim-p2pdma.bin");
  gdsio::FileHandle f(file.path);
  gdsio::CufileHandle h(f, 0);
  DeviceBuffer dst(file.bytes.size());
  gdsio::ReadOptions o;
  o.threads = 2;
  const auto res = gdsio::cufile_read(f, h, {{dst.p, file.bytes.size(), 0}}, o);
  EXPECT(res.backend == (want_gds && h.direct() ? "gds" : "cufile-compat"), res.backend, ": ", res.reason);
  EXPECT(same_bytes(dst.p, file, 0, file.bytes.size()), "the bytes read differ");
  gdsio::cufile_shutdown();
}

// Finding 5: batch entries of at most chunk_bytes, at most max_batch_io_size a
// submission, every wait bounded by the driver's timeout.
struct BatchRun {
  gdsio::ReadResult res;
  bool same = true;
};
BatchRun batch_read(const TestFile& file, std::size_t chunk) {
  gdsio::FileHandle f(file.path);
  gdsio::CufileHandle h(f, 0);
  // Requests: unaligned, empty, several chunks long, and one into the middle of a registered-like buffer.
  struct Req {
    std::uint64_t off;
    std::size_t n;
  };
  const std::vector<Req> reqs = {{0, 5 * chunk + 4096}, {100, 0}, {123, 77777}, {3 * chunk + 5, chunk + 9}};
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<gdsio::ReadRequest> rr;
  for (const Req& r : reqs) {
    bufs.push_back(std::make_unique<DeviceBuffer>(r.n + 1));
    rr.push_back({bufs.back()->p, r.n, r.off});
  }
  gdsio::ReadOptions o;
  o.chunk_bytes = chunk;
  o.threads = 2;
  BatchRun out;
  out.res = gdsio::cufile_read_batch(f, h, rr, o);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    out.same = out.same && same_bytes(bufs[i]->p, file, reqs[i].off, reqs[i].n) && bufs[i]->p[reqs[i].n] == 0xEE;
  }
  return out;
}

void cufile_batch_entries_and_timeout() {
  Fake cf = load_cufile({{"max_batch", 4}, {"timeout_ms", 250}});
  TestFile file(8 << 20, "shim-batch.bin");
  const std::size_t chunk = 1 << 20;
  const auto st = gdsio::cufile_status(true, 0);
  EXPECT(st.max_batch_io_size == 4 && st.batch_timeout_ms == 250, st.max_batch_io_size, " ", st.batch_timeout_ms);
  const BatchRun r = batch_read(file, chunk);
  EXPECT(r.same, "the bytes read differ (or a byte past a request was written)");
  EXPECT(r.res.nbytes == 5 * chunk + 4096 + 77777 + chunk + 9, r.res.nbytes);
  EXPECT(cf.get("max_entry") > 0 && cf.get("max_entry") <= static_cast<long>(chunk), "an entry of ", cf.get("max_entry"),
         " bytes, chunk_bytes is ", chunk);
  EXPECT(cf.get("oversized_batches") == 0, cf.get("oversized_batches"), " submissions over max_batch_io_size");
  EXPECT(cf.get("waits_without_timeout") == 0, cf.get("waits_without_timeout"), " waits without a timeout");
  EXPECT(cf.get("timeout_ms") == 250, "waited with a ", cf.get("timeout_ms"), " ms timeout");
  EXPECT(cf.get("reads") == 0, cf.get("reads"), " cuFileRead calls with nothing to retry");
  EXPECT(r.res.reason.find("timed out") == std::string::npos, r.res.reason);
  gdsio::cufile_shutdown();
}

void cufile_batch_default_timeout() {
  Fake cf = load_cufile({});
  TestFile file(1 << 20, "shim-batch-default.bin");
  const auto st = gdsio::cufile_status(true, 0);
  EXPECT(st.batch_timeout_ms == 10000, st.batch_timeout_ms);
  const BatchRun r = batch_read(file, 64 << 10);
  EXPECT(r.same, "the bytes read differ");
  EXPECT(cf.get("waits_without_timeout") == 0 && cf.get("timeout_ms") == 10000, cf.get("timeout_ms"));
  gdsio::cufile_shutdown();
}

void cufile_batch_timed_out_entries_are_reread() {
  Fake cf = load_cufile({{"max_batch", 4}, {"timeout_ms", 100}, {"timeout_every", 3}});
  TestFile file(8 << 20, "shim-batch-timeout.bin");
  const BatchRun r = batch_read(file, 1 << 20);
  EXPECT(r.same, "the bytes read differ");
  const long timed_out = cf.get("timed_out");
  EXPECT(timed_out >= 2, timed_out, " entries timed out");
  EXPECT(cf.get("reads") >= timed_out, cf.get("reads"), " cuFileRead calls for ", timed_out, " timed-out entries");
  EXPECT(r.res.reason.find(std::to_string(timed_out) + " batched cuFile reads timed out and were read with cuFileRead") !=
             std::string::npos,
         r.res.reason);
  gdsio::cufile_shutdown();
}

void cufile_stalled_batch_is_cancelled_and_reread() {
  Fake cf = load_cufile({{"max_batch", 4}, {"timeout_ms", 50}, {"stall_batch", 1}});
  TestFile file(8 << 20, "shim-batch-stall.bin");
  const BatchRun r = batch_read(file, 1 << 20);
  EXPECT(r.same, "the bytes read differ");
  EXPECT(cf.get("cancels") == 1, cf.get("cancels"), " cancels");
  EXPECT(cf.get("reads") >= 4, cf.get("reads"), " cuFileRead calls for a stalled batch of 4");
  EXPECT(r.res.reason.find("timed out and were read with cuFileRead") != std::string::npos, r.res.reason);
  gdsio::cufile_shutdown();
}

// ---- the pinned pipeline ------------------------------------------------------------------------------

// Finding 8: O_DIRECT reads land in cudaHostAlloc memory, which is only
// 256-byte aligned (the emulated one never page-aligned): each slot starts at
// a page boundary inside its allocation, and the head and tail padding of an
// unaligned request stay inside it (AddressSanitizer watches its end).
void pinned_direct_reads_into_unaligned_pinned_memory() {
  TestFile file((3 << 20) + 4096 * 5 + 123, "shim-pinned.bin");
  gdsio::FileHandle f(file.path);
  // The point of the case: a file system that refuses O_DIRECT cannot show it.
  EXPECT(f.direct_fd() >= 0, "O_DIRECT is refused in the working directory: ", f.direct_io_refusal());
  if (f.direct_fd() < 0) return;
  struct Req {
    std::uint64_t off;
    std::size_t n;
  };
  const std::vector<Req> reqs = {{0, file.bytes.size()}, {4095, 3 * 4096 + 2}, {1 << 20, 1 << 20}, {77, 1}};
  gdsio::ReadOptions o;
  o.threads = 2;
  o.chunk_bytes = 256 << 10;
  o.staging_buffers = 2;
  o.direct_io = true;
  o.stream = reinterpret_cast<std::uintptr_t>(kStream);
  for (const Req& r : reqs) {
    DeviceBuffer dst(r.n + 1);
    gdsio_emu::set_call_log(true);
    gdsio::ReadResult res;
    std::string error;
    try {
      res = gdsio::pinned_read(f, {{dst.p, r.n, r.off}}, o);
    } catch (const std::exception& e) {
      error = e.what();
    }
    gdsio_emu::set_call_log(false);
    const auto calls = gdsio_emu::take_calls();
    EXPECT(error.empty(), "offset ", r.off, ": ", error);
    EXPECT(res.direct_io && res.backend == "pinned", res.backend, " ", res.reason);
    EXPECT(same_bytes(dst.p, file, r.off, r.n) && dst.p[r.n] == 0xEE, "offset ", r.off, ": the bytes read differ");
    // Every copy reads from a page-aligned slot, at the file offset's place
    // in its page (chunks after a request's first start page-aligned), on the caller's stream.
    long copies = 0;
    for (const auto& c : calls) {
      if (c.rfind("cudaMemcpyAsync src=", 0) != 0) continue;
      ++copies;
      const auto src = std::strtoull(c.c_str() + std::strlen("cudaMemcpyAsync src="), nullptr, 16);
      EXPECT(src % 4096 == 0 || src % 4096 == r.off % 4096, "offset ", r.off, ": ", c);
      EXPECT(c.find("stream=" + kStreamText) != std::string::npos, c);
    }
    EXPECT(copies > 0, "no copy logged");
    for (const auto& c : calls)
      if (c.rfind("cudaHostAlloc ", 0) == 0)
        EXPECT(std::strtoull(c.c_str() + std::strlen("cudaHostAlloc "), nullptr, 16) % 4096 != 0,
               "the emulated cudaHostAlloc gave page-aligned memory: the case shows nothing: ", c);
  }
  const auto pool = gdsio::staging_pool_stats();
  EXPECT(pool.in_use_buffers == 0 && pool.cached_buffers > 0, pool.in_use_buffers, " in use, ", pool.cached_buffers,
         " cached");
  gdsio::release_staging();  // cudaFreeHost of each allocation (a wrong pointer is a fault)
  EXPECT(gdsio::staging_pool_stats().cached_buffers == 0, "");
}

const std::map<std::string, std::function<void()>>& scenarios() {
  static const std::map<std::string, std::function<void()>> s = {
      {"nvjpeg-version", nvjpeg_version},
      {"nvjpeg-device-backends-wait-before-decoding", nvjpeg_device_backends_wait_before_decoding},
      {"nvjpeg-failed-hardware-decode-waits-before-throwing", nvjpeg_failed_hardware_decode_waits_before_throwing},
      {"nvjpeg-upsampling-flag-per-backend", nvjpeg_upsampling_flag_per_backend},
      {"cufile-p2pdma-asked-not-supported", [] { p2pdma_case(true, 0, 0, false); }},
      {"cufile-p2pdma-asked-and-supported", [] { p2pdma_case(true, 1, 0, true); }},
      {"cufile-p2pdma-asked-and-supported-cufile-1.13", [] { p2pdma_case(true, 0, 1, true); }},
      {"cufile-p2pdma-supported-not-asked", [] { p2pdma_case(false, 1, 0, false); }},
      {"cufile-batch-entries-and-timeout", cufile_batch_entries_and_timeout},
      {"cufile-batch-default-timeout", cufile_batch_default_timeout},
      {"cufile-batch-timed-out-entries-are-reread", cufile_batch_timed_out_entries_are_reread},
      {"cufile-stalled-batch-is-cancelled-and-reread", cufile_stalled_batch_is_cancelled_and_reread},
      {"pinned-direct-reads-into-unaligned-pinned-memory", pinned_direct_reads_into_unaligned_pinned_memory},
  };
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const auto& [name, fn] : scenarios()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc != 3 || !scenarios().count(argv[2])) {
    std::fprintf(stderr, "usage: %s FAKES_DIR SCENARIO (or --list)\n", argv[0]);
    return 2;
  }
  g_fakes = argv[1];
  gdsio_emu::set_device_count(1);
  const std::string name = argv[2];
  try {
    scenarios().at(name)();
  } catch (const std::exception& e) {
    ++g_checks;
    ++g_failed;
    std::fprintf(stderr, "FAILED: %s threw: %s\n", name.c_str(), e.what());
  }
  for (const auto& f : gdsio_emu::take_faults()) {
    ++g_failed;
    std::fprintf(stderr, "FAULT: %s\n", f.c_str());
  }
  std::printf("shim %s: %d checks, %d failed\n", name.c_str(), g_checks, g_failed);
  return g_failed ? 1 : 0;
}
