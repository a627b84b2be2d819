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
#include "io/staging_ring.hpp"
#include "scenario.hpp"

namespace {

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

bool same_bytes(const unsigned char* got, const TestFile& f, std::uint64_t off, std::size_t n) {
  return std::memcmp(got, f.bytes.data() + off, n) == 0;
}

bool nvidia_fs_loaded() { return ::access("/proc/driver/nvidia-fs/version", R_OK) == 0; }

int current_device() {
  int d = -1;
  cudaGetDevice(&d);
  return d;
}

// What `fn` threw: the exception's type ("OsError", "Unavailable", "ValueError",
// "NvjpegError", "other") and its message; {"", ""} when it returned.
struct Thrown {
  std::string type, what;
  int error_number = 0;  // an OsError's errno
};
Thrown thrown_by(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const gdsio::OsError& e) {
    return {"OsError", e.what(), e.error_number()};
  } catch (const gdsio::Unavailable& e) {
    return {"Unavailable", e.what()};
  } catch (const gdsio::ValueError& e) {
    return {"ValueError", e.what()};
  } catch (const gdsio::image::NvjpegError& e) {
    return {"NvjpegError", e.what()};
  } catch (const std::exception& e) {
    return {"other", e.what()};
  }
  return {};
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// A pointer as the call log prints it.
std::string ptr_text(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// ---- nvJPEG --------------------------------------------------------------------------------------

using gdsio::image::JpegBackend;
using gdsio::image::JpegJob;
using gdsio::image::JpegOutput;

void load_nvjpeg() {
  const auto st = gdsio::image::nvjpeg_load(g_fakes + "/libfake_nvjpeg.so");
  if (!st.loaded) throw std::runtime_error("the fake libnvjpeg did not load: " + st.reason);
}

// A JPEG's markers as nvJPEG parses them (the fake's nvjpegGetImageInfo reads
// the SOF): SOI, APP1 segments of `app` bytes in all, DQT, SOF0 of a w x h
// YCbCr 4:2:0 image (after a fill byte when `fill`), DHT, SOS, 32 bytes of
// entropy-coded data, EOI. No real image: the fake decodes nothing.
std::vector<unsigned char> jpeg_bytes(int w, int h, std::size_t app = 0, bool fill = false) {
  std::vector<unsigned char> b = {0xFF, 0xD8};
  auto segment = [&](unsigned char marker, const std::vector<unsigned char>& body) {
    const std::size_t n = body.size() + 2;
    b.insert(b.end(), {0xFF, marker, static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n & 0xFF)});
    b.insert(b.end(), body.begin(), body.end());
  };
  for (std::size_t left = app; left > 0;) {
    const std::size_t k = std::min<std::size_t>(left, 65533);
    segment(0xE1, std::vector<unsigned char>(k, 'E'));
    left -= k;
  }
  segment(0xDB, std::vector<unsigned char>(65, 1));
  if (fill) b.push_back(0xFF);
  const auto hi = [](int v) { return static_cast<unsigned char>(v >> 8); };
  const auto lo = [](int v) { return static_cast<unsigned char>(v & 0xFF); };
  segment(0xC0, {8, hi(h), lo(h), hi(w), lo(w), 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1});
  segment(0xC4, std::vector<unsigned char>(29, 0));
  segment(0xDA, {3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0});
  b.insert(b.end(), 32, 0x12);
  b.insert(b.end(), {0xFF, 0xD9});
  return b;
}
// Bytes of jpeg_bytes(w, h, app) up to the end of its SOS segment.
std::size_t jpeg_header_bytes(std::size_t app, bool fill = false) {
  return jpeg_bytes(8, 8, app, fill).size() - 32 - 2;
}

// One RGB job: a bitstream (an 8x8 JPEG unless told), in host memory for the
// host backend and in emulated device memory for the others, as the binding
// takes them, and a (3, dst_h, dst_w) output in emulated device memory.
struct Job {
  bool on_host;
  std::vector<unsigned char> host;
  DeviceBuffer device, out;
  std::int64_t width, height;
  explicit Job(JpegBackend b = JpegBackend::kHardwareDevice, const std::vector<unsigned char>& image = jpeg_bytes(8, 8),
               int dst_w = 8, int dst_h = 8)
      : on_host(b == JpegBackend::kHost), host(image), device(image.size()),
        out(3 * static_cast<std::size_t>(dst_w) * dst_h), width(dst_w), height(dst_h) {
    std::memcpy(device.p, image.data(), image.size());
  }
  const unsigned char* data() const { return on_host ? host.data() : device.p; }
  JpegJob job() const {
    JpegJob j;
    j.data = data();
    j.length = host.size();
    j.dst = out.p;
    j.height = height;
    j.width = width;
    return j;
  }
  std::vector<JpegJob> jobs() const { return {job()}; }
  bool untouched() const { return std::all_of(out.p, out.p + out.n, [](unsigned char c) { return c == 0xEE; }); }
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
    Job job(b);
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

// ---- nvJPEG: what is not the happy path (issue 28, item 5) ------------------------------------------------

std::string ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

// The hardware-support check (nvjpegDecodeBatchedSupported per parsed header):
// 1 supported, 0 not, -1 unknown (a header nvJPEG cannot parse, a check that
// fails, a null or empty header, no stream); each stream made is destroyed,
// and the caller's device is current again after.
void nvjpeg_hardware_support_check() {
  gdsio_emu::set_device_count(2);
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  cudaSetDevice(1);
  static const unsigned char s[] = "S...", u[] = "U...", b[] = "B...", n[] = "N...";
  const std::vector<int> got = gdsio::image::nvjpeg_hardware_supported(0, {s, u, b, n, nullptr, s}, {4, 4, 4, 4, 4, 0});
  EXPECT(got == std::vector<int>({1, 0, -1, -1, -1, -1}), ints(got));
  EXPECT(nv.get("headers_parsed") == 4, nv.get("headers_parsed"), " headers parsed (null and empty ones need none)");
  EXPECT(nv.get("streams_created") == 1 && nv.get("streams_destroyed") == 1, nv.get("streams_created"), " streams made, ",
         nv.get("streams_destroyed"), " destroyed");
  EXPECT(current_device() == 1, "the check on cuda:0 left cuda:", current_device(), " current");
  EXPECT(gdsio::image::nvjpeg_hardware_supported(0, {}, {}).empty(), "");
  const Thrown t = thrown_by([] { gdsio::image::nvjpeg_hardware_supported(0, {s}, {}); });
  EXPECT(t.type == "ValueError" && has(t.what, "headers and lengths differ in size"), t.type, ": ", t.what);
  nv.set("stream_status", 5);  // nvjpegJpegStreamCreate fails: nothing is known
  EXPECT(gdsio::image::nvjpeg_hardware_supported(0, {s, u}, {4, 4}) == std::vector<int>({-1, -1}), "");
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// A device whose hardware backend reports no engines: the backend is unusable,
// saying so, a decode on it is refused, and the support check knows nothing.
void nvjpeg_no_hardware_engines() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  nv.set("hw_engines", 0);
  const auto info = gdsio::image::nvjpeg_probe(0);
  EXPECT(!info.backends[0].usable &&
             info.backends[0].reason == "cuda:0 has no hardware JPEG decoder (nvjpegGetHardwareDecoderInfo: 0 engines)",
         info.backends[0].reason);
  EXPECT(info.backends[1].usable && info.backends[2].usable, info.backends[1].reason, info.backends[2].reason);
  static const unsigned char s[] = "S...";
  EXPECT(gdsio::image::nvjpeg_hardware_supported(0, {s}, {4}) == std::vector<int>({-1}), "");
  Job job;
  const Thrown t = thrown_by([&] {
    gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHardwareDevice, JpegOutput::kRGB, job.jobs(),
                                      reinterpret_cast<std::uintptr_t>(kStream));
  });
  EXPECT(t.type == "Unavailable" && has(t.what, "nvjpeg-hardware-device cannot run on cuda:0: cuda:0 has no hardware"),
         t.type, ": ", t.what);
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// nvjpegCreateEx refusing a backend: the probe says which call failed with
// which status, and what that status means for that backend.
void nvjpeg_backend_creation_failures() {
  gdsio_emu::set_device_count(2);
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  nv.set("create_fail_mask", 1 << 5);  // the hardware backend
  nv.set("create_status", 7);          // NVJPEG_STATUS_ARCH_MISMATCH
  auto info = gdsio::image::nvjpeg_probe(0);
  EXPECT(!info.backends[0].usable &&
             info.backends[0].reason ==
                 "nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE_DEVICE) failed on cuda:0: NVJPEG_STATUS_ARCH_MISMATCH (7) "
                 "(this GPU has no hardware JPEG decoder, or this libnvjpeg does not drive it)",
         info.backends[0].reason);
  EXPECT(info.backends[1].usable && info.backends[2].usable, info.backends[1].reason, info.backends[2].reason);
  Job job;
  const Thrown t = thrown_by([&] {
    gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHardwareDevice, JpegOutput::kRGB, job.jobs(),
                                      reinterpret_cast<std::uintptr_t>(kStream));
  });
  EXPECT(t.type == "Unavailable" && has(t.what, "nvjpeg-hardware-device cannot run on cuda:0: nvjpegCreateEx("),
         t.type, ": ", t.what);
  // On cuda:1 (its handles are its own): the device backends and the host one refused as invalid.
  nv.set("create_fail_mask", (1 << 4) | (1 << 0));
  nv.set("create_status", 2);  // NVJPEG_STATUS_INVALID_PARAMETER
  info = gdsio::image::nvjpeg_probe(1);
  EXPECT(info.backends[0].usable, info.backends[0].reason);
  EXPECT(!info.backends[1].usable &&
             info.backends[1].reason ==
                 "nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID_DEVICE) failed on cuda:1: NVJPEG_STATUS_INVALID_PARAMETER (2) "
                 "(libnvjpeg 13.0 may predate the device-bitstream backends)",
         info.backends[1].reason);
  EXPECT(!info.backends[2].usable &&
             info.backends[2].reason ==
                 "nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT) failed on cuda:1: NVJPEG_STATUS_INVALID_PARAMETER (2)",
         info.backends[2].reason);
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// A decoder state that cannot be made, or initialised, fails the call with
// nvJPEG's status; a state that failed is not reused; a good one is, without
// initialising it again for the same batch size.
void nvjpeg_state_and_initialize_failures() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  auto decode = [](std::size_t images) {
    std::vector<std::unique_ptr<Job>> jobs;
    std::vector<JpegJob> all;
    for (std::size_t i = 0; i < images; ++i) {
      jobs.push_back(std::make_unique<Job>(JpegBackend::kHost));
      all.push_back(jobs.back()->jobs()[0]);
    }
    return thrown_by([&] {
      gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHost, JpegOutput::kRGB, all,
                                        reinterpret_cast<std::uintptr_t>(kStream));
    });
  };
  nv.set("state_status", 5);  // NVJPEG_STATUS_ALLOCATOR_FAILURE
  Thrown t = decode(1);
  EXPECT(t.type == "NvjpegError" &&
             t.what == "nvjpegJpegStateCreate (nvjpeg-host, cuda:0) failed: NVJPEG_STATUS_ALLOCATOR_FAILURE (5)",
         t.type, ": ", t.what);
  nv.set("state_status", 0);
  nv.set("init_status", 8);  // NVJPEG_STATUS_INTERNAL_ERROR
  t = decode(1);
  EXPECT(t.type == "NvjpegError" && t.what == "nvJPEG failed: nvjpegDecodeBatchedInitialize (nvjpeg-host, cuda:0, 1 image): "
                                              "NVJPEG_STATUS_INTERNAL_ERROR (8)",
         t.type, ": ", t.what);
  EXPECT(nv.get("states_created") == 1, nv.get("states_created"));
  nv.set("init_status", 0);
  t = decode(1);
  EXPECT(t.type.empty(), t.type, ": ", t.what);
  EXPECT(nv.get("states_created") == 2, "the state that failed was reused: ", nv.get("states_created"), " made");
  t = decode(1);  // the same batch size: the idle state, as it was
  EXPECT(t.type.empty() && nv.get("states_created") == 2 && nv.get("initializations") == 2, t.what, " ",
         nv.get("states_created"), " states, ", nv.get("initializations"), " initialisations");
  t = decode(2);  // another batch size: initialised again
  EXPECT(t.type.empty() && nv.get("states_created") == 2 && nv.get("initializations") == 3, t.what, " ",
         nv.get("states_created"), " states, ", nv.get("initializations"), " initialisations");
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// Every status nvjpegDecodeBatched can return is named by nvjpeg.h's name; a
// status about the bitstream is the caller's ValueError, the others NvjpegError.
void nvjpeg_every_status_is_named() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", nullptr);
  const std::map<int, std::string> names = {
      {1, "NVJPEG_STATUS_NOT_INITIALIZED"},  {2, "NVJPEG_STATUS_INVALID_PARAMETER"},
      {3, "NVJPEG_STATUS_BAD_JPEG"},         {4, "NVJPEG_STATUS_JPEG_NOT_SUPPORTED"},
      {5, "NVJPEG_STATUS_ALLOCATOR_FAILURE"}, {6, "NVJPEG_STATUS_EXECUTION_FAILED"},
      {7, "NVJPEG_STATUS_ARCH_MISMATCH"},     {8, "NVJPEG_STATUS_INTERNAL_ERROR"},
      {9, "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED"}, {10, "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"},
      {42, "unknown nvJPEG status"}};
  for (const auto& [status, name] : names) {
    nv.set("decode_status", status);
    Job job(JpegBackend::kHost);
    const Thrown t = thrown_by([&] {
      gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHost, JpegOutput::kY, job.jobs(),
                                        reinterpret_cast<std::uintptr_t>(kStream));
    });
    const bool data = status == 2 || status == 3 || status == 4 || status == 9 || status == 10;
    EXPECT(t.type == (data ? "ValueError" : "NvjpegError"), status, ": ", t.type, ": ", t.what);
    EXPECT(t.what == (data ? "nvJPEG rejected the batch: " : "nvJPEG failed: ") +
                         std::string("nvjpegDecodeBatched (nvjpeg-host, cuda:0, 1 image): ") + name + " (" +
                         std::to_string(status) + ")",
           t.what);
  }
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// Before a library is loaded, and when the one named cannot be: every entry
// point says why, and a later load of a good library still works.
void nvjpeg_load_failures() {
  Job job(JpegBackend::kHost);
  auto decode = [&] {
    gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kHost, JpegOutput::kRGB, job.jobs(),
                                      reinterpret_cast<std::uintptr_t>(kStream));
  };
  Thrown t = thrown_by(decode);
  EXPECT(t.type == "Unavailable" && t.what == "nvJPEG is not loaded: nvjpeg_load was not called", t.type, ": ", t.what);
  const std::string missing = g_fakes + "/no-such-libnvjpeg.so";
  auto st = gdsio::image::nvjpeg_load(missing);
  EXPECT(!st.loaded && has(st.reason, "libnvjpeg could not be loaded: ") && has(st.reason, missing), st.reason);
  const auto info = gdsio::image::nvjpeg_probe(0);
  for (const auto& b : info.backends)
    EXPECT(!b.usable && b.reason == "nvJPEG is not loaded: " + st.reason, b.reason);
  t = thrown_by([] {
    static const unsigned char s[] = "S...";
    gdsio::image::nvjpeg_hardware_supported(0, {s}, {4});
  });
  EXPECT(t.type == "Unavailable" && t.what == "nvJPEG is not loaded: " + st.reason, t.type, ": ", t.what);
  st = gdsio::image::nvjpeg_load(g_fakes + "/libfake_cufile.so");  // a library, but not libnvjpeg
  EXPECT(!st.loaded && st.reason == "libnvjpeg at " + g_fakes + "/libfake_cufile.so lacks nvjpegGetProperty", st.reason);
  load_nvjpeg();
  EXPECT(gdsio::image::nvjpeg_status().major == 13, gdsio::image::nvjpeg_status().major);
  t = thrown_by(decode);
  EXPECT(t.type.empty(), t.type, ": ", t.what);
  EXPECT(gdsio::image::nvjpeg_release(), "");
}

// ---- nvJPEG: the bitstream's size against dst's ----------------------------------------------------

long count_calls(const std::vector<std::string>& calls, const std::string& prefix) {
  return std::count_if(calls.begin(), calls.end(), [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
}

// A job whose dst is not the size nvJPEG finds in its bitstream (smaller: it
// would write past dst; larger, or of another width) fails the whole call with
// ValueError naming it, on every backend, before any decode is initialised or
// launched: the call log has nvjpegGetImageInfo of each image and no
// nvjpegDecodeBatched*. The device backends' headers reach nvjpegGetImageInfo
// in host memory, copied after the wait for the stream. The refused call's
// state is reused, and a batch of the right sizes decodes after it.
void nvjpeg_dst_smaller_than_the_image_is_refused() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  struct Bad {
    int image_w, image_h, dst_w, dst_h;
  };
  for (JpegBackend b : {JpegBackend::kHardwareDevice, JpegBackend::kGpuHybridDevice, JpegBackend::kHost}) {
    const std::string name = gdsio::image::jpeg_backend_name(b);
    for (const Bad bad : {Bad{8, 8, 8, 4}, Bad{16, 8, 8, 8}, Bad{8, 8, 16, 8}}) {
      Job good(b), wrong(b, jpeg_bytes(bad.image_w, bad.image_h), bad.dst_w, bad.dst_h);
      gdsio_emu::set_call_log(true);
      const Thrown t = thrown_by([&] {
        gdsio::image::nvjpeg_decode_batch(0, b, JpegOutput::kRGB, {good.job(), wrong.job()},
                                          reinterpret_cast<std::uintptr_t>(kStream));
      });
      gdsio_emu::set_call_log(false);
      const auto calls = gdsio_emu::take_calls();
      const std::string want =
          gdsio::detail::concat("jobs[1]: the bitstream is ", bad.image_w, "x", bad.image_h,
                                " (nvjpegGetImageInfo), dst holds ", bad.dst_w, "x", bad.dst_h,
                                ": nvJPEG writes the bitstream's size, so dst must have it");
      EXPECT(t.type == "ValueError" && t.what == want, name, ": ", t.type, ": ", t.what);
      EXPECT(find_call(calls, "nvjpegDecodeBatched") < 0, name, ": a decode after the refusal", joined(calls));
      EXPECT(count_calls(calls, "nvjpegGetImageInfo n=") == 2, name, ": ", joined(calls));
      EXPECT(find_call(calls, "nvjpegGetImageInfo given device memory") < 0, name, joined(calls));
      EXPECT(good.untouched() && wrong.untouched(), name, ": an output was written");
      if (b != JpegBackend::kHost) {
        // Each header is copied from the bitstream, then the stream is waited for, then parsed.
        const long copy = find_call(calls, "cudaMemcpyAsync src=" + ptr_text(wrong.device.p));
        const long sync = find_call(calls, "cudaStreamSynchronize " + kStreamText);
        const long info = find_call(calls, "nvjpegGetImageInfo");
        EXPECT(copy >= 0 && copy < sync && sync < info, name, ": ", joined(calls));
      }
    }
    Job good(b), also(b);
    gdsio_emu::set_call_log(true);
    const Thrown t = thrown_by([&] {
      gdsio::image::nvjpeg_decode_batch(0, b, JpegOutput::kRGB, {good.job(), also.job()},
                                        reinterpret_cast<std::uintptr_t>(kStream));
    });
    gdsio_emu::set_call_log(false);
    const auto calls = gdsio_emu::take_calls();
    EXPECT(t.type.empty(), name, ": ", t.type, ": ", t.what);
    // The host backend's bitstreams are parsed whole; the device ones' headers up to their SOS.
    const std::size_t parsed = b == JpegBackend::kHost ? good.host.size() : jpeg_header_bytes(0);
    const long info = find_call(calls, "nvjpegGetImageInfo n=" + std::to_string(parsed));
    EXPECT(info >= 0 && find_call(calls, "nvjpegDecodeBatched backend=") > info, name, ": ", joined(calls));
  }
  EXPECT(nv.get("states_created") == 3, nv.get("states_created"), " states made (a refusal is not a failed state)");
  EXPECT(gdsio::image::nvjpeg_release(), "a refused decode still counted as in flight");
}

// Device bitstreams' headers on the host: one longer than the first copy (big
// APP1 segments) is fetched again until its SOS is in, and nvjpegGetImageInfo
// gets exactly the bytes through the SOS; a libnvjpeg that wants more than the
// header is given the whole bitstream; bytes that are not a JPEG, or that end
// inside the header, go whole to nvJPEG, which rejects them (ValueError naming
// the job); its own failure is an NvjpegError, and that state is not reused.
void nvjpeg_image_info_of_device_bitstreams() {
  load_nvjpeg();
  Fake nv = fake("libfake_nvjpeg.so", "fake_nvjpeg_set", "fake_nvjpeg_get");
  const auto hybrid = JpegBackend::kGpuHybridDevice;
  auto decode = [](const Job& job, std::vector<std::string>* calls = nullptr) {
    gdsio_emu::set_call_log(true);
    const Thrown t = thrown_by([&] {
      gdsio::image::nvjpeg_decode_batch(0, JpegBackend::kGpuHybridDevice, JpegOutput::kRGB, job.jobs(),
                                        reinterpret_cast<std::uintptr_t>(kStream));
    });
    gdsio_emu::set_call_log(false);
    auto c = gdsio_emu::take_calls();
    if (calls) *calls = std::move(c);
    return t;
  };
  for (const std::size_t app : {std::size_t{20000}, std::size_t{150000}}) {
    for (const bool fill : {false, true}) {
      Job job(hybrid, jpeg_bytes(8, 8, app, fill));
      std::vector<std::string> calls;
      const Thrown t = decode(job, &calls);
      EXPECT(t.type.empty(), app, ": ", t.type, ": ", t.what);
      const std::string info = "nvjpegGetImageInfo n=" + std::to_string(jpeg_header_bytes(app, fill));
      EXPECT(count_calls(calls, "nvjpegGetImageInfo") == 1 && find_call(calls, info) >= 0, app, ": ", joined(calls));
      EXPECT(count_calls(calls, "cudaMemcpyAsync src=" + ptr_text(job.device.p)) >= 2, app,
             ": the header was not fetched again", joined(calls));
      EXPECT(find_call(calls, info) >= 0 && find_call(calls, "nvjpegDecodeBatched backend=4") > find_call(calls, info),
             joined(calls));
    }
  }
  // A libnvjpeg that will not parse a header alone: the whole bitstream, then the decode.
  nv.set("info_needs_eoi", 1);
  {
    Job job(hybrid);
    std::vector<std::string> calls;
    const Thrown t = decode(job, &calls);
    EXPECT(t.type.empty(), t.type, ": ", t.what);
    const long header = find_call(calls, "nvjpegGetImageInfo n=" + std::to_string(jpeg_header_bytes(0)));
    const long whole = find_call(calls, "nvjpegGetImageInfo n=" + std::to_string(job.host.size()));
    EXPECT(header >= 0 && whole > header && find_call(calls, "nvjpegDecodeBatched backend=4") > whole, joined(calls));
  }
  nv.set("info_needs_eoi", 0);
  // A header that says 0 pixels wide: the whole bitstream is asked, then refused for its size.
  Thrown t = decode(Job(hybrid, jpeg_bytes(0, 8)));
  EXPECT(t.type == "ValueError" && has(t.what, "jobs[0]: the bitstream is 0x8 (nvjpegGetImageInfo), dst holds 8x8"),
         t.type, ": ", t.what);
  const std::string rejected =
      "jobs[0]: nvJPEG rejected the bitstream: nvjpegGetImageInfo (nvjpeg-gpu-hybrid-device, cuda:0): ";
  std::vector<std::string> calls;
  Job not_jpeg(hybrid, std::vector<unsigned char>(10000, 0xEE));  // past the first copy: fetched whole
  t = decode(not_jpeg, &calls);
  EXPECT(t.type == "ValueError" && t.what == rejected + "NVJPEG_STATUS_BAD_JPEG (3)", t.type, ": ", t.what);
  EXPECT(find_call(calls, "nvjpegGetImageInfo n=10000") >= 0 && find_call(calls, "nvjpegDecodeBatched") < 0,
         joined(calls));
  std::vector<unsigned char> cut = jpeg_bytes(8, 8, 20000);
  cut.resize(9000);  // ends inside the APP1 segment, past the first copy
  t = decode(Job(hybrid, cut), &calls);
  EXPECT(t.type == "ValueError" && t.what == rejected + "NVJPEG_STATUS_INCOMPLETE_BITSTREAM (10)", t.type, ": ",
         t.what);
  EXPECT(find_call(calls, "nvjpegGetImageInfo n=9000") >= 0 && find_call(calls, "nvjpegDecodeBatched") < 0,
         joined(calls));
  EXPECT(find_call(calls, "nvjpegGetImageInfo given device memory") < 0, joined(calls));
  const long states = nv.get("states_created");
  nv.set("info_status", 8);  // NVJPEG_STATUS_INTERNAL_ERROR
  t = decode(Job(hybrid));
  EXPECT(t.type == "NvjpegError" &&
             t.what == "jobs[0]: nvJPEG failed: nvjpegGetImageInfo (nvjpeg-gpu-hybrid-device, cuda:0): "
                       "NVJPEG_STATUS_INTERNAL_ERROR (8)",
         t.type, ": ", t.what);
  nv.set("info_status", 0);
  t = decode(Job(hybrid));
  EXPECT(t.type.empty() && nv.get("states_created") == states + 1, t.type, ": ", t.what, "; ",
         nv.get("states_created") - states, " states made after nvjpegGetImageInfo failed (1 wanted)");
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

// Issue 28, F3: a failing batch call is cuFile's problem, not the file's: the
// reads fall back to cuFileRead (as KvikIO's compat mode does), the bytes are
// right, and the result says which call failed and how many reads it moved.
// The requests of batch_read make 9 entries of at most 1 MiB: batches of 4, 4, 1.
void cufile_batch_setup_fails() {
  Fake cf = load_cufile({{"max_batch", 4}, {"setup_fail", 5039}, {"fail_batch", 1}});
  TestFile file(8 << 20, "shim-batch-setup.bin");
  const BatchRun r = batch_read(file, 1 << 20);
  EXPECT(r.same, "the bytes read differ");
  EXPECT(has(r.res.reason, "cuFileBatchIOSetUp failed: batch setup internal error (retry later) (CUfileOpError 5039); "
                           "5 reads were made with cuFileRead instead"),
         r.res.reason);
  EXPECT(cf.get("setups") == 2, cf.get("setups"), " set-ups: the batch API was tried again after it failed");
  EXPECT(cf.get("entries") == 4 && cf.get("reads") == 5, cf.get("entries"), " entries, ", cf.get("reads"), " reads");
  EXPECT(cf.get("destroyed") == 1, cf.get("destroyed"), " batches destroyed");
  gdsio::cufile_shutdown();
}

void cufile_batch_submit_fails() {
  Fake cf = load_cufile({{"max_batch", 4}, {"submit_fail", 5040}});
  TestFile file(8 << 20, "shim-batch-submit.bin");
  const BatchRun r = batch_read(file, 1 << 20);
  EXPECT(r.same, "the bytes read differ");
  EXPECT(has(r.res.reason, "cuFileBatchIOSubmit failed: batch submit internal error (retry later) (CUfileOpError 5040); "
                           "9 reads were made with cuFileRead instead"),
         r.res.reason);
  EXPECT(cf.get("reads") == 9, cf.get("reads"), " reads");
  EXPECT(cf.get("cancels") == 0 && cf.get("destroyed") == 1, cf.get("cancels"), " cancels (nothing was submitted), ",
         cf.get("destroyed"), " destroyed");
  gdsio::cufile_shutdown();
}

void cufile_batch_get_status_fails() {
  // The first wait completes one entry; the second fails: the batch's other
  // three are cancelled and read again, and so are the five after it.
  Fake cf = load_cufile({{"max_batch", 4}, {"status_fail", 5041}, {"per_status", 1}, {"status_fail_after", 1}});
  TestFile file(8 << 20, "shim-batch-status.bin");
  gdsio_emu::set_call_log(true);
  const BatchRun r = batch_read(file, 1 << 20);
  gdsio_emu::set_call_log(false);
  const auto calls = gdsio_emu::take_calls();
  EXPECT(r.same, "the bytes read differ");
  EXPECT(has(r.res.reason, "cuFileBatchIOGetStatus failed: batch get status internal error (retry later) "
                           "(CUfileOpError 5041); 8 reads were made with cuFileRead instead"),
         r.res.reason);
  EXPECT(cf.get("reads") == 8 && cf.get("cancels") == 1 && cf.get("destroyed") == 1, cf.get("reads"), " reads, ",
         cf.get("cancels"), " cancels, ", cf.get("destroyed"), " destroyed");
  const long cancel = find_call(calls, "cuFileBatchIOCancel batch=0");
  EXPECT(cancel >= 0 && cancel < find_call(calls, "cuFileRead n="), "cuFileRead before the batch was cancelled",
         joined(calls));
  gdsio::cufile_shutdown();
}

void cufile_batch_failed_and_short_entries_are_reread() {
  // Entries 3 and 7 (0-based, in submission order) fail; 2, 5 and 8 read half their bytes.
  Fake cf = load_cufile({{"max_batch", 4}, {"fail_every", 4}, {"short_every", 3}});
  TestFile file(8 << 20, "shim-batch-failed.bin");
  const BatchRun r = batch_read(file, 1 << 20);
  EXPECT(r.same, "the bytes read differ");
  EXPECT(cf.get("failed") == 2 && cf.get("short") == 3, cf.get("failed"), " failed, ", cf.get("short"), " short");
  EXPECT(cf.get("reads") == cf.get("failed") + cf.get("short"), cf.get("reads"), " cuFileRead calls");
  EXPECT(has(r.res.reason, "2 batched cuFile reads failed and were read with cuFileRead (the first: 1048576 bytes at "
                           "offset 3145728: status 64, returned -5044 (cufile io error))"),
         r.res.reason);
  EXPECT(!has(r.res.reason, "timed out") && !has(r.res.reason, "instead"), r.res.reason);
  gdsio::cufile_shutdown();
}

// ---- cuFile: what is not the happy path (issue 28, item 5) ---------------------------------------------------

// A registered destination: reads into it name its base and the place as an
// offset (threaded and batched), deregistration gives it back once, a refusal
// says why, and shutdown deregisters what is left; the caller's device is kept.
void cufile_buffer_register_and_deregister() {
  gdsio_emu::set_device_count(2);
  Fake cf = load_cufile({{"max_batch", 4}});
  cudaSetDevice(1);
  TestFile file((1 << 20) + 5, "shim-registered.bin");
  DeviceBuffer buf(file.bytes.size() + 8192);
  std::string why;
  EXPECT(gdsio::cufile_register_buffer(buf.p, buf.n, 0, &why), why);
  EXPECT(current_device() == 1, "registering on cuda:0 left cuda:", current_device(), " current");
  EXPECT(gdsio::cufile_registered_buffers() == 1 && cf.get("buf_registered") == 1, gdsio::cufile_registered_buffers());
  {
    gdsio::FileHandle f(file.path);
    gdsio::CufileHandle h(f, 0);
    gdsio::ReadOptions o;
    o.threads = 2;
    o.chunk_bytes = 64 << 10;
    const std::size_t n = 300000;
    gdsio::cufile_read(f, h, {{buf.p + 4096, n, 123}}, o);
    EXPECT(same_bytes(buf.p + 4096, file, 123, n), "the bytes read differ");
    const long threaded = cf.get("into_registered");
    EXPECT(threaded == cf.get("reads") && threaded >= 5, threaded, " of ", cf.get("reads"),
           " cuFileRead calls named the registered buffer");
    std::memset(buf.p, 0xEE, buf.n);
    gdsio::cufile_read_batch(f, h, {{buf.p + 8192, file.bytes.size(), 0}}, o);
    EXPECT(same_bytes(buf.p + 8192, file, 0, file.bytes.size()), "the bytes read differ (batch)");
    EXPECT(cf.get("into_registered") - threaded == cf.get("entries") && cf.get("entries") >= 17,
           cf.get("into_registered") - threaded, " of ", cf.get("entries"), " batch entries named the registered buffer");
    EXPECT(cf.get("outside_registered") == 0, cf.get("outside_registered"), " reads past the registered buffer");
  }
  gdsio::cufile_deregister_buffer(buf.p);
  gdsio::cufile_deregister_buffer(buf.p);  // not registered any more: nothing to do
  EXPECT(gdsio::cufile_registered_buffers() == 0 && cf.get("buf_deregistered") == 1, cf.get("buf_deregistered"));
  cf.set("buf_register_fail", 5045);
  why.clear();
  EXPECT(!gdsio::cufile_register_buffer(buf.p, buf.n, 0, &why), "a refused registration succeeded");
  EXPECT(why == "cuFileBufRegister refused the buffer: cufile buffer registration error (CUfileOpError 5045)", why);
  EXPECT(gdsio::cufile_registered_buffers() == 0, gdsio::cufile_registered_buffers());
  cf.set("buf_register_fail", 0);
  EXPECT(gdsio::cufile_register_buffer(buf.p, buf.n, 0, nullptr), "");
  gdsio::cufile_shutdown();  // deregisters what is still registered, then closes the driver
  EXPECT(gdsio::cufile_registered_buffers() == 0 && cf.get("buf_deregistered") == 2 && cf.get("bad_deregisters") == 0,
         cf.get("buf_deregistered"), " deregistered, ", cf.get("bad_deregisters"), " unknown");
  EXPECT(!gdsio::cufile_status(false, 0).driver_open, "the driver is still open after shutdown");
  EXPECT(current_device() == 1, "cuda:", current_device(), " current");
}

// cuFileHandleRegister refusing the file: Unavailable naming the file and the
// error, and the driver is not held open for the handle that never was.
void cufile_handle_register_fails() {
  Fake cf = load_cufile({{"handle_fail", 5025}});
  TestFile file(4096, "shim-handle.bin");
  gdsio::FileHandle f(file.path);
  const Thrown t = thrown_by([&] { gdsio::CufileHandle h(f, 0); });
  EXPECT(t.type == "Unavailable" &&
             has(t.what, "cuFileHandleRegister failed for 'shim-handle.bin': driver or file access error (CUfileOpError 5025)"),
         t.type, ": ", t.what);
  // The likely cause where cuFile cannot see udev (a container without /run/udev), and where its log is.
  const bool udev = ::access("/run/udev", R_OK | X_OK) == 0;
  EXPECT(has(t.what, "/run/udev is not readable here") != udev && has(t.what, "$CUFILE_LOGFILE_PATH"), t.what);
  cf.set("handle_fail", 0);
  {
    gdsio::CufileHandle h(f, 0);
    EXPECT(h.get() != nullptr && cf.get("handles") == 1, cf.get("handles"));
  }
  EXPECT(cf.get("handles") == 0, cf.get("handles"), " handles left registered");
  gdsio::cufile_shutdown();
  EXPECT(!gdsio::cufile_status(false, 0).driver_open, "shutdown kept the driver open for a handle that failed");
}

// cuFileRead interrupted by a signal (-1 with EINTR, or -EINTR) is called again.
void cufile_read_interrupted_is_retried() {
  Fake cf = load_cufile({{"eintr_every", 3}});
  TestFile file((1 << 20) + 5, "shim-eintr.bin");
  gdsio::FileHandle f(file.path);
  gdsio::CufileHandle h(f, 0);
  DeviceBuffer dst(file.bytes.size());
  gdsio::ReadOptions o;
  o.threads = 2;
  o.chunk_bytes = 64 << 10;
  const Thrown t = thrown_by([&] { gdsio::cufile_read(f, h, {{dst.p, file.bytes.size(), 0}}, o); });
  EXPECT(t.type.empty(), t.type, ": ", t.what);
  EXPECT(same_bytes(dst.p, file, 0, file.bytes.size()), "the bytes read differ");
  EXPECT(cf.get("eintr") >= 2, cf.get("eintr"), " interrupted reads (both forms wanted)");
}

// A failing cuFileRead: OSError with the errno it gave (-1 and errno, or a
// negative errno), EIO naming a CUfileOpError, EIO for a file that ends early;
// each names the file.
void cufile_read_errors_name_the_file() {
  Fake cf = load_cufile({});
  TestFile file(1000, "shim-read-error.bin");
  gdsio::FileHandle f(file.path);
  gdsio::CufileHandle h(f, 0);
  DeviceBuffer dst(2000);
  gdsio::ReadOptions o;
  o.threads = 1;
  struct Want {
    long ret, err;  // what cuFileRead returns (and errno)
    std::size_t n;
    int error_number;
    const char* says;
  };
  for (const Want& w : {Want{-EIO, 0, 100, EIO, "cuFileRead failed at offset 0: "},
                        Want{-1, EBADF, 100, EBADF, "cuFileRead failed at offset 0: "},
                        Want{-5044, 0, 100, EIO, "cuFileRead failed at offset 0: cufile io error (5044)"},
                        Want{0, 0, 2000, EIO, "ended early"}}) {
    cf.set("read_error", w.ret);
    cf.set("read_errno", w.err);
    Thrown t;
    try {
      gdsio::cufile_read(f, h, {{dst.p, w.n, 0}}, o);
    } catch (const gdsio::OsError& e) {
      t = {"OsError", e.what(), e.error_number()};
      EXPECT(e.path() == file.path, e.path());
    }
    EXPECT(t.type == "OsError" && t.error_number == w.error_number && has(t.what, w.says), w.ret, ": ", t.type, " ",
           t.error_number, ": ", t.what);
  }
}

// cuFileDriverOpen failing: the status says so (a CUDA driver error with its
// CUresult), and a handle is refused with that reason.
void cufile_driver_open_fails() {
  load_cufile({{"driver_open_fail", 5011}});
  const auto st = gdsio::cufile_status(true, 0);
  EXPECT(!st.driver_open && st.reason == "cuFileDriverOpen failed: CUDA Driver API error (CUfileOpError 5011, CUresult 999)",
         st.reason);
  TestFile file(4096, "shim-driver.bin");
  gdsio::FileHandle f(file.path);
  const Thrown t = thrown_by([&] { gdsio::CufileHandle h(f, 0); });
  EXPECT(t.type == "Unavailable" && t.what == "cuFile is not usable here: " + st.reason, t.type, ": ", t.what);
  DeviceBuffer buf(4096);
  const Thrown r = thrown_by([&] { gdsio::cufile_register_buffer(buf.p, buf.n, 0, nullptr); });
  EXPECT(r.type == "Unavailable" && r.what == t.what, r.type, ": ", r.what);
  EXPECT(st.mode.empty() && gdsio::cufile_status(true, 0).reason == st.reason, "the driver's open was retried");
}

// Compat mode forced (CUFILE_FORCE_COMPAT_MODE, or force_compat_mode in
// cufile.json) wins over P2PDMA; each driver open decides afresh.
void cufile_compat_mode_forced() {
  Fake cf = load_cufile({{"p2p_param", 1}, {"p2p_fflag", 1}});
  const std::string forced = "cuFile compat mode is forced (CUFILE_FORCE_COMPAT_MODE or force_compat_mode in cufile.json)";
  ::setenv("CUFILE_FORCE_COMPAT_MODE", "Yes", 1);
  auto st = gdsio::cufile_status(true, 0);
  EXPECT(st.driver_open && !st.true_gds && st.mode == "cufile-compat" && st.reason == forced, st.mode, ": ", st.reason);
  gdsio::cufile_shutdown();
  ::setenv("CUFILE_FORCE_COMPAT_MODE", "off", 1);
  cf.set("force_compat_param", 1);
  st = gdsio::cufile_status(true, 0);
  EXPECT(st.driver_open && !st.true_gds && st.reason == forced, st.mode, ": ", st.reason);
  gdsio::cufile_shutdown();
  ::unsetenv("CUFILE_FORCE_COMPAT_MODE");
  cf.set("force_compat_param", 0);
  st = gdsio::cufile_status(true, 0);
  EXPECT(st.driver_open && st.true_gds && st.mode == "gds", st.mode, ": ", st.reason);
  gdsio::cufile_shutdown();
}

// Before libcufile is loaded, and when the one named cannot be: the status
// says why, a handle is refused, and a later load of a good library works.
void cufile_load_failures() {
  auto st = gdsio::cufile_status(true, 0);
  EXPECT(!st.loaded && st.reason == "libcufile was not loaded", st.reason);
  const std::string missing = g_fakes + "/no-such-libcufile.so";
  st = gdsio::cufile_load(missing);
  EXPECT(!st.loaded && has(st.reason, "libcufile could not be loaded: ") && has(st.reason, missing), st.reason);
  st = gdsio::cufile_load(g_fakes + "/libfake_nvjpeg.so");  // a library, but not libcufile
  EXPECT(!st.loaded && st.reason == "libcufile at " + g_fakes + "/libfake_nvjpeg.so lacks a required cuFile symbol",
         st.reason);
  TestFile file(4096, "shim-load.bin");
  gdsio::FileHandle f(file.path);
  const Thrown t = thrown_by([&] { gdsio::CufileHandle h(f, 0); });
  EXPECT(t.type == "Unavailable" && t.what == "cuFile is not usable here: " + st.reason, t.type, ": ", t.what);
  load_cufile({});
  st = gdsio::cufile_status(true, 0);
  EXPECT(st.loaded && st.driver_open && st.version == 1150, st.reason);
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

// Issue 28, F1: the remote readers' staging ring into cuda:N, driven on the
// caller's own thread (as with one remote worker): each call makes cuda:N
// current for its CUDA calls and gives the caller's device back.
void staging_ring_restores_the_callers_device() {
  gdsio_emu::set_device_count(2);
  std::vector<unsigned char> src(3 * 4096 + 5);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  for (int caller : {0, 1}) {
    const int target = 1 - caller;
    EXPECT(cudaSetDevice(caller) == cudaSuccess, "");
    DeviceBuffer dst(src.size() + 1);
    {
      gdsio::StagingRing ring(gdsio::make_cuda_copy_engine(target, reinterpret_cast<std::uintptr_t>(kStream), 0), 2,
                              4096);
      for (std::size_t off = 0; off < src.size(); off += 4096) {
        const std::size_t n = std::min<std::size_t>(4096, src.size() - off);
        const std::size_t k = ring.next();
        EXPECT(current_device() == caller, "next() into cuda:", target, " left cuda:", current_device(),
               " current on a thread that had cuda:", caller);
        std::memcpy(ring.data(k), src.data() + off, n);
        ring.copy(k, reinterpret_cast<std::uintptr_t>(dst.p + off), n);
        EXPECT(current_device() == caller, "copy() into cuda:", target, " left cuda:", current_device(), " current");
      }
      ring.drain();
      EXPECT(current_device() == caller, "drain() left cuda:", current_device(), " current");
      EXPECT(ring.copies() == 4 && ring.waits() == 2, ring.copies(), " copies, ", ring.waits(), " waits");
      ring.close();
      EXPECT(current_device() == caller, "close() left cuda:", current_device(), " current");
    }
    EXPECT(std::memcmp(dst.p, src.data(), src.size()) == 0 && dst.p[src.size()] == 0xEE, "the bytes copied differ");
  }
  EXPECT(gdsio::staging_pool_stats().in_use_buffers == 0, gdsio::staging_pool_stats().in_use_buffers, " slots in use");
  gdsio::release_staging();
}

const std::map<std::string, std::function<void()>>& scenarios() {
  static const std::map<std::string, std::function<void()>> s = {
      {"nvjpeg-version", nvjpeg_version},
      {"nvjpeg-device-backends-wait-before-decoding", nvjpeg_device_backends_wait_before_decoding},
      {"nvjpeg-failed-hardware-decode-waits-before-throwing", nvjpeg_failed_hardware_decode_waits_before_throwing},
      {"nvjpeg-upsampling-flag-per-backend", nvjpeg_upsampling_flag_per_backend},
      {"nvjpeg-hardware-support-check", nvjpeg_hardware_support_check},
      {"nvjpeg-no-hardware-engines", nvjpeg_no_hardware_engines},
      {"nvjpeg-backend-creation-failures", nvjpeg_backend_creation_failures},
      {"nvjpeg-state-and-initialize-failures", nvjpeg_state_and_initialize_failures},
      {"nvjpeg-every-status-is-named", nvjpeg_every_status_is_named},
      {"nvjpeg-load-failures", nvjpeg_load_failures},
      {"nvjpeg-dst-smaller-than-the-image-is-refused", nvjpeg_dst_smaller_than_the_image_is_refused},
      {"nvjpeg-image-info-of-device-bitstreams", nvjpeg_image_info_of_device_bitstreams},
      {"cufile-p2pdma-asked-not-supported", [] { p2pdma_case(true, 0, 0, false); }},
      {"cufile-p2pdma-asked-and-supported", [] { p2pdma_case(true, 1, 0, true); }},
      {"cufile-p2pdma-asked-and-supported-cufile-1.13", [] { p2pdma_case(true, 0, 1, true); }},
      {"cufile-p2pdma-supported-not-asked", [] { p2pdma_case(false, 1, 0, false); }},
      {"cufile-batch-entries-and-timeout", cufile_batch_entries_and_timeout},
      {"cufile-batch-default-timeout", cufile_batch_default_timeout},
      {"cufile-batch-timed-out-entries-are-reread", cufile_batch_timed_out_entries_are_reread},
      {"cufile-stalled-batch-is-cancelled-and-reread", cufile_stalled_batch_is_cancelled_and_reread},
      {"cufile-batch-setup-fails-reads-with-cufileread", cufile_batch_setup_fails},
      {"cufile-batch-submit-fails-reads-with-cufileread", cufile_batch_submit_fails},
      {"cufile-batch-get-status-fails-reads-with-cufileread", cufile_batch_get_status_fails},
      {"cufile-batch-failed-and-short-entries-are-reread", cufile_batch_failed_and_short_entries_are_reread},
      {"cufile-buffer-register-and-deregister", cufile_buffer_register_and_deregister},
      {"cufile-handle-register-fails", cufile_handle_register_fails},
      {"cufile-read-interrupted-is-retried", cufile_read_interrupted_is_retried},
      {"cufile-read-errors-name-the-file", cufile_read_errors_name_the_file},
      {"cufile-driver-open-fails", cufile_driver_open_fails},
      {"cufile-compat-mode-forced", cufile_compat_mode_forced},
      {"cufile-load-failures", cufile_load_failures},
      {"pinned-direct-reads-into-unaligned-pinned-memory", pinned_direct_reads_into_unaligned_pinned_memory},
      {"staging-ring-restores-the-callers-device", staging_ring_restores_the_callers_device},
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
