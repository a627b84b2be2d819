// A one-thread kernel launched by `gdsio doctor`: it fails with
// cudaErrorNoKernelImageForDevice when this build carries neither SASS nor PTX
// for the GPU at hand (GDSIO_CUDA_ARCHITECTURES did not cover it).
#include <memory>

#include "core/cuda_rt.hpp"

namespace gdsio {

namespace {
__global__ void probe_kernel(int* out) { *out = 42; }
}  // namespace

std::string cuda_kernel_probe(int device) {
  std::unique_ptr<DeviceGuard> guard;
  try {
    guard = std::make_unique<DeviceGuard>(device);
  } catch (const std::exception& e) {
    return e.what();
  }
  int* d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(int));
  if (e == cudaSuccess) {
    probe_kernel<<<1, 1>>>(d);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  int host = 0;
  if (e == cudaSuccess) e = cudaMemcpy(&host, d, sizeof(int), cudaMemcpyDeviceToHost);
  if (d) cudaFree(d);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return host == 42 ? "" : "the probe kernel ran but wrote a wrong value";
}

}  // namespace gdsio
