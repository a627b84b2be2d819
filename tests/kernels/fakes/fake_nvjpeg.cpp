// A stand-in libnvjpeg for the shim tests (shim_tests.cpp): the entry points
// nvjpeg_shim.cpp calls, logging each call in order (gdsio_emu_log) and
// returning what the test configured (fake_nvjpeg_set). It decodes nothing.
#include <cstdio>
#include <cstring>
#include <string>

extern "C" void gdsio_emu_log(const char* line) __attribute__((weak));

namespace {
struct Handle {
  int backend;
};
struct State {
  int unused;
};
int g_decode_status = 0;          // what nvjpegDecodeBatched returns
int g_refuse_upsampling_flag = 0;  // a bit per backend enum: nvjpegCreateEx refuses the flag
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
  else std::fprintf(stderr, "fake_nvjpeg_set: unknown key %s\n", key);
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
  *handle = new Handle{backend};
  return 0;
}
int nvjpegDestroy(void* h) {
  delete static_cast<Handle*>(h);
  return 0;
}
int nvjpegJpegStateCreate(void*, void** state) {
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
  return 0;
}
int nvjpegDecodeBatched(void* h, void*, const unsigned char* const*, const std::size_t*, void*, void*) {
  log("nvjpegDecodeBatched backend=" + std::to_string(static_cast<Handle*>(h)->backend) + " status=" +
      std::to_string(g_decode_status));
  return g_decode_status;
}
int nvjpegGetHardwareDecoderInfo(void*, unsigned* engines, unsigned* cores) {
  *engines = 1;
  *cores = 5;
  return 0;
}

}  // extern "C"
