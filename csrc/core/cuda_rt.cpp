#include "core/cuda_rt.hpp"

namespace gdsio {

#ifdef GDSIO_WITH_CUDA

CudaStatus cuda_status() {
  CudaStatus s;
  cudaRuntimeGetVersion(&s.runtime_version);
  if (cudaDriverGetVersion(&s.driver_version) != cudaSuccess) s.driver_version = 0;
  cudaError_t e = cudaGetDeviceCount(&s.device_count);
  if (e != cudaSuccess) {
    s.device_count = 0;
    s.error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();
  } else if (s.device_count == 0) {
    s.error = "no CUDA device is visible";
  }
  return s;
}

void cuda_use_device(int device) {
  // The device count cannot change within a process; ask once.
  static const CudaStatus s = cuda_status();
  if (s.device_count == 0) throw Unavailable("no usable CUDA device: " + s.error);
  GDSIO_EXPECT(device < s.device_count, ValueError, "device cuda:", device, " does not exist (",
               s.device_count, " visible)");
  GDSIO_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice(", device, ")");
}

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  cuda_use_device(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

std::string cuda_pointer_kind(const void* p, int* device) {
  cudaPointerAttributes a{};
  GDSIO_CUDA_CHECK(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
  if (device) *device = a.device;
  switch (a.type) {
    case cudaMemoryTypeDevice: return "device";
    case cudaMemoryTypeManaged: return "managed";
    case cudaMemoryTypeHost: return "host";
    default: return "host";  // unregistered pageable memory
  }
}

#else

CudaStatus cuda_status() {
  CudaStatus s;
  s.error = "gdsio was built without CUDA";
  return s;
}
void cuda_use_device(int) { throw_no_cuda(); }
DeviceGuard::DeviceGuard(int) { throw_no_cuda(); }
DeviceGuard::~DeviceGuard() = default;
std::string cuda_pointer_kind(const void*, int*) { throw_no_cuda(); }
std::string cuda_kernel_probe(int) { return "gdsio was built without CUDA"; }

#endif

}  // namespace gdsio
