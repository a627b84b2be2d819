// The subset of CUDA that gdsio's kernels use, as host C++: the kernel
// sources (csrc/image/*.cu) compile against this header unchanged, after
// emulate.py has rewritten the launch syntax `k<<<grid, block, shm, s>>>(args)`
// into `::gdsio_emu::Launch(...).run(...)` and noted each `__shared__` array
// (line numbers kept, so reports point into the real file).
//
// The model: a grid runs block by block; a block is a team of fibers (user
// level threads, one stack each), one per CUDA thread, with threadIdx,
// blockIdx, blockDim and gridDim as thread-locals; __syncthreads() is a
// barrier over the team; __shared__ arrays are one per block (poisoned at
// every block's start); the __*_rn intrinsics are correctly rounded host
// operations (the build passes -ffp-contract=off). Under ThreadSanitizer each
// fiber is a thread of its own whose only happens-before edges are the
// barriers, so a missing __syncthreads() is reported as a race. Every launch
// is checked against CUDA's limits (emu_runtime.cpp). Why fibers and not OS
// threads: tests/kernels/README.md.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

static_assert(FLT_EVAL_METHOD == 0, "the emulation needs IEEE single and double arithmetic (no x87 excess precision)");

// ---- keywords ------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
// One per block: blocks run one at a time, so a function-local static is the
// block's; emulate.py adds a call after the declaration that poisons it at
// each block's start and counts it against the 48 KiB limit.
#define __shared__ static

// ---- types and built-in variables ----------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

void __syncthreads();

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
// The legacy default stream (also what a null stream means) and the per-thread one.
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01

// The values of CUDA's driver_types.h.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

// ---- the runtime calls around launches (emu_runtime.cpp) -------------------------------------
// Streams are asynchronous: each is a queue run by a worker thread of its own,
// and copies, memsets, launches and event records are queued, run only when
// something needs them (see emu_runtime.cpp, "streams").
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t n, cudaStream_t s = nullptr);
cudaError_t cudaMalloc(void** p, std::size_t n);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
// Pinned memory: 256-byte aligned and never page-aligned, the least CUDA promises.
cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned flags);
cudaError_t cudaFreeHost(void* p);
// Events: a record is a marker queued on the stream; waits and queries are for the last marker recorded.
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

// ---- intrinsics: one correctly rounded IEEE operation each ------------------------------------
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __saturatef(float v) { return v != v ? 0.f : v < 0.f ? 0.f : v > 1.f ? 1.f : v; }
inline int __float2int_rn(float v) { return (int)std::nearbyint(v); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

// CUDA's global min/max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// ---- launches ----------------------------------------------------------------------------------
namespace gdsio_emu {

// CUDA's limits (compute capability 7.0 and newer, CUDA 12.1 and newer).
constexpr unsigned kMaxGridX = 0x7fffffffu;
constexpr unsigned kMaxGridYZ = 65535;
constexpr unsigned kMaxBlockXY = 1024;
constexpr unsigned kMaxBlockZ = 64;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr std::size_t kMaxSharedPerBlock = 48 * 1024;  // without the opt-in attribute
constexpr std::size_t kMaxParamBytes = 32764;

struct Site {
  const char* kernel;  // the launch's kernel expression, as written
  const char* file;
  int line;
};

// Bytes of the parameter buffer: each parameter at its alignment, as CUDA lays them out.
template <typename... P>
constexpr std::size_t param_bytes() {
  std::size_t n = 0;
  ((n = (n + alignof(P) - 1) / alignof(P) * alignof(P) + sizeof(P)), ...);
  return n;
}

// A type-erased `void()` callable the fibers run (no allocation, no std::function).
struct Body {
  void* obj;
  void (*call)(void*);
};

class Launch {
 public:
  Launch(Site site, dim3 grid, dim3 block, std::size_t dynamic_shared = 0, cudaStream_t stream = nullptr)
      : site_(site), grid_(grid), block_(block), dynamic_shared_(dynamic_shared), stream_(stream) {}

  // `kernel` is a generic lambda calling the kernel with the parameters; they
  // are copied here once, as CUDA copies them at the launch, and the grid is
  // queued on the stream (it runs when the stream's worker reaches it).
  template <typename K, typename... A>
  void run(K&& kernel, A&&... args) {
    struct Closure {
      std::decay_t<K> kernel;
      std::tuple<std::decay_t<A>...> params;
    };
    const long record = admit(param_bytes<std::decay_t<A>...>());
    if (record < 0) return;
    auto* c = new Closure{std::forward<K>(kernel), std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    enqueue(record, Body{c, [](void* o) {
                           auto* k = static_cast<Closure*>(o);
                           std::apply(k->kernel, k->params);
                         }},
            [](void* o) { delete static_cast<Closure*>(o); });
  }

 private:
  long admit(std::size_t param_bytes);  // the limits; -1: the launch fails as on CUDA, else its record's index
  void enqueue(long record, Body body, void (*destroy)(void*));
  Site site_;
  dim3 grid_, block_;
  std::size_t dynamic_shared_;
  cudaStream_t stream_;
};

// Called right after each `__shared__` declaration (inserted by emulate.py):
// the first thread of a block to pass it poisons the array; its size counts
// against the block's shared memory.
void shared_array(void* p, std::size_t bytes, int line);
// `extern __shared__ T name[];` becomes `T* const name = dynamic_shared<T>();`.
void* dynamic_shared_bytes();
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_bytes());
}

}  // namespace gdsio_emu
