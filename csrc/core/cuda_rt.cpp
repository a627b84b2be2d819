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
    // Without a driver every runtime call fails with cudaErrorInsufficientDriver, a
    // consequence that would read as a second cause: name the one cause.
    s.error = s.driver_version == 0 ? std::string(kNoDriver)
                                    : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
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

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent from the driver the runtime already loaded
// (gdsio never links libcuda). CUresult is an int enum; 0 is CUDA_SUCCESS.
struct ContextApi {
  int (*get)(void**) = nullptr;
  int (*set)(void*) = nullptr;
};

const ContextApi& context_api() {
  static const ContextApi api = [] {
    ContextApi a;
    void* get = nullptr;
    void* set = nullptr;
    cudaDriverEntryPointQueryResult qg{}, qs{};
#if CUDART_VERSION >= 12050
    const bool found =
        cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 4000, cudaEnableDefault, &qg) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 4000, cudaEnableDefault, &qs) == cudaSuccess;
#else  // CUDA 12.0 to 12.4: the by-version call does not exist yet
    const bool found = cudaGetDriverEntryPoint("cuCtxGetCurrent", &get, cudaEnableDefault, &qg) == cudaSuccess &&
                       cudaGetDriverEntryPoint("cuCtxSetCurrent", &set, cudaEnableDefault, &qs) == cudaSuccess;
#endif
    if (found && qg == cudaDriverEntryPointSuccess && qs == cudaDriverEntryPointSuccess && get && set) {
      a.get = reinterpret_cast<int (*)(void**)>(get);
      a.set = reinterpret_cast<int (*)(void*)>(set);
    }
    (void)cudaGetLastError();
    return a;
  }();
  return api;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  const ContextApi& ctx = context_api();
  if (ctx.get && ctx.get(&previous_ctx_) == 0) {
    exact_ = true;
  } else if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  cuda_use_device(device);
}

DeviceGuard::~DeviceGuard() {
  if (exact_) (void)context_api().set(previous_ctx_);  // null again where the thread had none
  else if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void cuda_stream_synchronize(std::uintptr_t stream) {
  if (stream != 0) {
    GDSIO_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)),
                     "cudaStreamSynchronize (the caller's stream, before a write outside stream order)");
    return;
  }
  // The default stream (0, which also stands for the per-thread one): an event
  // recorded on the legacy stream completes after the work of every blocking
  // stream, per-thread default streams included; a sync of an idle stream 0
  // might not wait for them.
  cudaEvent_t ev = nullptr;
  GDSIO_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t e = cudaEventRecord(ev, cudaStreamLegacy);
  if (e == cudaSuccess) e = cudaEventSynchronize(ev);
  (void)cudaEventDestroy(ev);
  GDSIO_CUDA_CHECK(e, "waiting for the default stream (before a write outside stream order)");
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
void cuda_stream_synchronize(std::uintptr_t) { throw_no_cuda(); }
std::string cuda_pointer_kind(const void*, int*) { throw_no_cuda(); }
std::string cuda_kernel_probe(int) { return "gdsio was built without CUDA"; }

#endif

}  // namespace gdsio
