// A stand-in libnvjpeg for the shim tests (shim_tests.cpp): the entry points
// nvjpeg_shim.cpp calls, logging each call in order (gdsio_emu_log) and
// returning what the test configured (fake_nvjpeg_set); it counts what it saw
// (fake_nvjpeg_get). It decodes nothing. Its hardware-support check reads the
// first byte of a "header": 'S' supported, 'U' unsupported, 'B' a header it
// cannot parse, 'N' a stream the check itself fails on. nvjpegGetImageInfo
// walks the JPEG markers for the first SOF, as nvJPEG does, and refuses
// device memory (nvJPEG parses the host's).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

extern "C" void gdsio_emu_log(const char* line) __attribute__((weak));
// The emulated runtime's view of a pointer (shim_tests exports it; absent
// when loaded into Python, where no emulated device memory exists).
namespace gdsio {
std::string cuda_pointer_kind(const void* p, int* device) __attribute__((weak));
}

namespace {
struct Handle {
  int backend;
};
struct State {
  int unused;
};
struct Stream {
  unsigned char first = 0;  // the first byte of the header parsed last
};
int g_decode_status = 0;          // what nvjpegDecodeBatched returns
int g_refuse_upsampling_flag = 0;  // a bit per backend enum: nvjpegCreateEx refuses the flag
std::mutex g_mu;
std::map<std::string, long> g_cfg = {
    {"create_status", 0},     // what nvjpegCreateEx returns for the backends of create_fail_mask
    {"create_fail_mask", 0},  // a bit per backend enum
    {"hw_engines", 1},        // nvjpegGetHardwareDecoderInfo's engines
    {"state_status", 0},      // what nvjpegJpegStateCreate returns
    {"init_status", 0},       // what nvjpegDecodeBatchedInitialize returns
    {"stream_status", 0},     // what nvjpegJpegStreamCreate returns
    {"info_status", 0},       // what nvjpegGetImageInfo returns (0: what the bitstream says)
    {"info_needs_eoi", 0},    // nvjpegGetImageInfo wants the whole bitstream (up to EOI), not a header
};
std::map<std::string, long> g_count;
long cfg(const char* k) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_cfg[k];
}
void count(const char* k) {
  std::lock_guard<std::mutex> lk(g_mu);
  ++g_count[k];
}
int g_version[3] = {13, 0, 4};
int g_cudart[3] = {13, 0, 88};

void log(const std::string& s) {
  if (gdsio_emu_log) gdsio_emu_log(s.c_str());
}
}  // namespace

extern "C" {

void fake_nvjpeg_set(const char* key, long value) {
  const std::string k = key;
  if (k == "decode_status") g_decode_status = static_cast<int>(value);
  else if (k == "refuse_upsampling_flag") g_refuse_upsampling_flag = static_cast<int>(value);
  else {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_cfg.count(k)) std::fprintf(stderr, "fake_nvjpeg_set: unknown key %s\n", key);
    g_cfg[k] = value;
  }
}
long fake_nvjpeg_get(const char* key) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_count[key];
}

int nvjpegGetProperty(int type, int* v) {
  if (type < 0 || type > 2) return 2;
  *v = g_version[type];
  return 0;
}
int nvjpegGetCudartProperty(int type, int* v) {
  if (type < 0 || type > 2) return 2;
  *v = g_cudart[type];
  return 0;
}
int nvjpegCreateEx(int backend, void*, void*, unsigned flags, void** handle) {
  log("nvjpegCreateEx backend=" + std::to_string(backend) + " flags=" + std::to_string(flags));
  if ((flags & (1u << 5)) && (g_refuse_upsampling_flag >> backend & 1)) return 2;
  if (cfg("create_fail_mask") >> backend & 1) return static_cast<int>(cfg("create_status"));
  *handle = new Handle{backend};
  return 0;
}
int nvjpegDestroy(void* h) {
  delete static_cast<Handle*>(h);
  return 0;
}
int nvjpegJpegStateCreate(void*, void** state) {
  if (const long st = cfg("state_status")) return static_cast<int>(st);
  count("states_created");
  *state = new State{0};
  return 0;
}
int nvjpegJpegStateDestroy(void* state) {
  delete static_cast<State*>(state);
  return 0;
}
int nvjpegDecodeBatchedInitialize(void* h, void*, int batch, int, int) {
  log("nvjpegDecodeBatchedInitialize backend=" + std::to_string(static_cast<Handle*>(h)->backend) + " batch=" +
      std::to_string(batch));
  count("initializations");
  return static_cast<int>(cfg("init_status"));
}
int nvjpegDecodeBatched(void* h, void*, const unsigned char* const*, const std::size_t*, void*, void*) {
  log("nvjpegDecodeBatched backend=" + std::to_string(static_cast<Handle*>(h)->backend) + " status=" +
      std::to_string(g_decode_status));
  return g_decode_status;
}
// Status 3 (BAD_JPEG) for bytes that are not a JPEG's markers, 10
// (INCOMPLETE_BITSTREAM) for a JPEG that ends before its SOF (or, with
// info_needs_eoi, before an EOI at its end); else the SOF's sizes per component.
int nvjpegGetImageInfo(void*, const unsigned char* data, std::size_t length, int* components, int* subsampling,
                       int* widths, int* heights) {
  count("image_infos");
  if (gdsio::cuda_pointer_kind && gdsio::cuda_pointer_kind(data, nullptr) == "device") {
    log("nvjpegGetImageInfo given device memory");
    return 2;  // NVJPEG_STATUS_INVALID_PARAMETER
  }
  log("nvjpegGetImageInfo n=" + std::to_string(length));
  if (const long st = cfg("info_status")) return static_cast<int>(st);
  if (length < 2 || data[0] != 0xFF || data[1] != 0xD8) return 3;
  if (cfg("info_needs_eoi") && (length < 4 || data[length - 2] != 0xFF || data[length - 1] != 0xD9)) return 10;
  for (std::size_t pos = 2; pos + 4 <= length;) {
    if (data[pos] != 0xFF) return 3;
    const unsigned m = data[pos + 1];
    if (m == 0xFF) {  // a fill byte
      ++pos;
      continue;
    }
    const std::size_t len = std::size_t{data[pos + 2]} << 8 | data[pos + 3];
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (!sof) {
      if (m == 0xDA || m == 0xD9) return 3;  // a scan, or the end, before any SOF
      pos += 2 + len;
      continue;
    }
    if (pos + 2 + len > length || len < 8) return 10;
    const unsigned char* f = data + pos + 4;  // P, Y, X, Nf, then (C, HV, Tq) per component
    const int h = f[1] << 8 | f[2], w = f[3] << 8 | f[4], n = f[5];
    if (n < 1 || n > 4 || len < 8u + 3u * n) return 3;
    int hmax = 1, vmax = 1;
    for (int c = 0; c < n; ++c) {
      hmax = std::max(hmax, f[7 + 3 * c] >> 4);
      vmax = std::max(vmax, f[7 + 3 * c] & 15);
    }
    *components = n;
    *subsampling = n == 1 ? 5 : 2;  // NVJPEG_CSS_GRAY, NVJPEG_CSS_420 (not looked at by the shim)
    for (int c = 0; c < 4; ++c) {
      const int hc = c < n ? f[7 + 3 * c] >> 4 : 0, vc = c < n ? f[7 + 3 * c] & 15 : 0;
      widths[c] = c < n ? (w * hc + hmax - 1) / hmax : 0;
      heights[c] = c < n ? (h * vc + vmax - 1) / vmax : 0;
    }
    return 0;
  }
  return 10;
}
int nvjpegGetHardwareDecoderInfo(void*, unsigned* engines, unsigned* cores) {
  *engines = static_cast<unsigned>(cfg("hw_engines"));
  *cores = 5;
  return 0;
}
int nvjpegJpegStreamCreate(void*, void** stream) {
  if (const long st = cfg("stream_status")) return static_cast<int>(st);
  count("streams_created");
  *stream = new Stream;
  return 0;
}
int nvjpegJpegStreamDestroy(void* stream) {
  count("streams_destroyed");
  delete static_cast<Stream*>(stream);
  return 0;
}
int nvjpegJpegStreamParseHeader(void*, const unsigned char* data, std::size_t length, void* stream) {
  count("headers_parsed");
  if (!data || !length || data[0] == 'B') return 3;  // NVJPEG_STATUS_BAD_JPEG
  static_cast<Stream*>(stream)->first = data[0];
  return 0;
}
int nvjpegDecodeBatchedSupported(void*, void* stream, int* is_supported) {
  const unsigned char first = static_cast<Stream*>(stream)->first;
  if (first == 'N') return 2;
  *is_supported = first == 'S' ? 0 : 1;  // nvJPEG's convention: 0 means supported
  return 0;
}

}  // extern "C"
