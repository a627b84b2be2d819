// The CUDA runtime as gdsio uses it. Everything here exists in a build
// without CUDA too, where it raises "gdsio was built without CUDA".
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

#ifdef GDSIO_WITH_CUDA
#include <cuda_runtime_api.h>

#define GDSIO_CUDA_CHECK(expr, ...)                                                  \
  do {                                                                               \
    cudaError_t gdsio_err_ = (expr);                                                 \
    if (gdsio_err_ != cudaSuccess) {                                                 \
      (void)cudaGetLastError(); /* clear a sticky-free error */                      \
      throw ::gdsio::CudaError(::gdsio::detail::concat(                              \
          __VA_ARGS__, ": ", cudaGetErrorName(gdsio_err_), ": ",                     \
          cudaGetErrorString(gdsio_err_)));                                          \
    }                                                                                \
  } while (0)
#endif

namespace gdsio {

constexpr bool built_with_cuda() {
#ifdef GDSIO_WITH_CUDA
  return true;
#else
  return false;
#endif
}

[[noreturn]] inline void throw_no_cuda() {
  throw Unavailable("gdsio was built without CUDA (nvcc was not found when it was compiled); "
                    "reinstall with the CUDA toolkit on PATH for GPU reads");
}

// What cudaDriverGetVersion reporting 0 means; the one cause given when no driver is installed.
inline constexpr const char* kNoDriver = "no NVIDIA driver is installed (libcuda.so.1 not found)";

struct CudaStatus {
  int device_count = 0;
  int runtime_version = 0;  // of the statically linked cudart
  int driver_version = 0;   // 0 when no driver
  std::string error;        // why no device can be used, if none
};

// Never throws: says how many devices there are, or why none.
CudaStatus cuda_status();

// Throws Unavailable unless `device` exists, and makes it current on this thread.
void cuda_use_device(int device);

// Makes `device` current on this thread and restores the caller's exact CUDA
// context on destruction: a read into cuda:1 must not change what torch sees as
// current, and a thread that had no context gets none back (restoring "device
// 0" there would create a context on GPU 0: hundreds of MB in every DDP rank).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  void* previous_ctx_ = nullptr;  // CUcontext; null: none was current
  bool exact_ = false;            // previous_ctx_ is known (the driver entry points were found)
};

// cudaStreamSynchronize(stream): work that writes outside stream order (a
// cuFile read, the nvJPEG engines) first waits for what the caller queued.
void cuda_stream_synchronize(std::uintptr_t stream);

// Where a pointer lives: "device", "host" (pinned or pageable), "managed".
// `device` receives the owning device for device memory.
std::string cuda_pointer_kind(const void* p, int* device);

// Checks that a launch of the probe kernel works on `device`: this build
// carries SASS or PTX for it. Returns an empty string or the CUDA error.
std::string cuda_kernel_probe(int device);

}  // namespace gdsio
