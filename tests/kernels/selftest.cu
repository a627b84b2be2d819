// Kernels that check the emulator itself (replay --self-test): CUDA's launch
// limits refused as CUDA refuses them, the built-in variables, a barrier that
// orders the team, the faults it must report, and correctly rounded
// arithmetic. Compiled through the same launch rewrite as csrc/image/*.cu.
#include <cstdio>
#include <string>
#include <vector>

#include "emu_control.hpp"

namespace gdsio_emu {
namespace {

struct Big {
  char bytes[kMaxParamBytes + 1];
};

__global__ void noop_kernel() {}
__global__ void big_param_kernel(const __grid_constant__ Big b, int* out) { *out = b.bytes[0]; }

// Every thread writes its coordinates.
__global__ void where_kernel(unsigned* out) {
  const unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned* o = out + 6 * (b * blockDim.x * blockDim.y * blockDim.z + t);
  o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
  o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
}

// Each thread reads its neighbour's value after the barrier; twice, so the
// second round's writes must wait for the first round's reads.
template <typename T>
__global__ void rotate_kernel(T* out, int rounds) {
  __shared__ T s[256];
  const int t = threadIdx.x, n = blockDim.x;
  T v = (T)(t + 1000 * blockIdx.x);
  for (int k = 0; k < rounds; ++k) {
    s[t] = v;
    __syncthreads();
    v = s[(t + 1) % n];
    __syncthreads();
  }
  out[blockIdx.x * n + t] = v;
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x % 2) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void too_much_shared_kernel(char* out) {
  __shared__ char s[kMaxSharedPerBlock + 1];
  s[threadIdx.x] = 1;
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void unwritten_shared_kernel(unsigned char* out) {
  __shared__ unsigned char s[64];
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void dynamic_shared_kernel(int* out) {
  extern __shared__ int dyn[];
  dyn[threadIdx.x] = (int)threadIdx.x * 3;
  __syncthreads();
  out[threadIdx.x] = dyn[blockDim.x - 1 - threadIdx.x];
}

__global__ void rounding_kernel(const float* in, float* out) {
  out[0] = in[0] * in[0] - in[1];                   // must not fuse (-ffp-contract=off)
  out[1] = __fsub_rn(__fmul_rn(in[0], in[0]), in[1]);
  out[2] = __fmaf_rn(in[0], in[0], -in[1]);         // fused on purpose
}

int g_failed = 0, g_checks = 0;
void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failed;
    std::printf("FAIL self-test: %s\n", what.c_str());
  }
}

cudaError_t last() { return cudaGetLastError(); }

void expect_refused(cudaError_t want, const std::string& what) {
  const cudaError_t got = last();
  expect(got == want, what + ": " + cudaGetErrorName(got) + ", " + cudaGetErrorName(want) + " expected");
}

bool has_fault(const std::string& needle) {
  bool found = false;
  for (const auto& f : take_faults()) found |= f.find(needle) != std::string::npos;
  return found;
}

}  // namespace

int run_self_tests() {
  set_device_count(1);
  take_launches();
  take_faults();
  noop_kernel<<<dim3(1, 65536), 1>>>();
  expect_refused(cudaErrorInvalidConfiguration, "gridDim.y 65536");
  noop_kernel<<<dim3(1, 1, 65536), 1>>>();
  expect_refused(cudaErrorInvalidConfiguration, "gridDim.z 65536");
  noop_kernel<<<1, 1025>>>();
  expect_refused(cudaErrorInvalidConfiguration, "1025 threads a block");
  noop_kernel<<<1, dim3(32, 32, 2)>>>();
  expect_refused(cudaErrorInvalidConfiguration, "2048 threads a block");
  noop_kernel<<<0, 32>>>();
  expect_refused(cudaErrorInvalidConfiguration, "an empty grid");
  noop_kernel<<<1, dim3(32, 0)>>>();
  expect_refused(cudaErrorInvalidConfiguration, "an empty block");
  noop_kernel<<<1, 32, kMaxSharedPerBlock + 1>>>();
  expect_refused(cudaErrorInvalidValue, "48 KiB + 1 of dynamic shared memory");
  {
    static Big big;
    int out = 0;
    big_param_kernel<<<1, 1>>>(big, &out);
    expect_refused(cudaErrorInvalidValue, "32765 bytes of parameters");
  }
  noop_kernel<<<dim3(2, 65535), 1>>>();
  expect(last() == cudaSuccess, "gridDim.y 65535 is allowed");
  expect(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");

  {
    const dim3 grid(2, 3, 2), block(4, 2, 2);
    std::vector<unsigned> out(6 * 12 * 16, 99);
    where_kernel<<<grid, block>>>(out.data());
    bool ok = last() == cudaSuccess;
    // Launches are queued on their stream and run when something waits for them.
    if (stream_mode() == StreamMode::kLazy) expect(out[0] == 99, "a launch ran when made, not when waited for");
    cudaDeviceSynchronize();
    for (unsigned b = 0; b < 12; ++b)
      for (unsigned t = 0; t < 16; ++t) {
        const unsigned* o = &out[6 * (b * 16 + t)];
        ok &= o[0] == t % 4 && o[1] == (t / 4) % 2 && o[2] == t / 8 && o[3] == b % 2 && o[4] == (b / 2) % 3 &&
              o[5] == b / 6;
      }
    expect(ok, "threadIdx / blockIdx of every thread");
  }
  {
    std::vector<int> out(3 * 256);
    rotate_kernel<<<3, 256>>>(out.data(), 5);
    cudaDeviceSynchronize();
    bool ok = last() == cudaSuccess;
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 256; ++t) ok &= out[b * 256 + t] == (t + 5) % 256 + 1000 * b;
    expect(ok, "the barrier orders the block (5 rounds, 256 threads, 3 blocks)");
    expect(take_faults().empty(), "no fault from a correct barrier kernel");
  }
  {
    std::vector<int> out(64);
    divergent_kernel<<<1, 64>>>(out.data());
    expect(has_fault("returned while 32 wait at __syncthreads()"), "a barrier only half the block reaches");
  }
  {
    std::vector<char> out(32);
    too_much_shared_kernel<<<1, 32>>>(out.data());
    expect(has_fault("exceed 48 KiB a block"), "more than 48 KiB of static shared memory");
  }
  {
    std::vector<unsigned char> out(64);
    unwritten_shared_kernel<<<1, 64>>>(out.data());
    cudaDeviceSynchronize();
    bool ok = true;
    for (unsigned char c : out) ok &= c == 0xA5;
    expect(ok, "shared memory starts poisoned (0xA5) in every block");
  }
  {
    std::vector<int> out(128);
    dynamic_shared_kernel<<<1, 128, 128 * sizeof(int)>>>(out.data());
    cudaDeviceSynchronize();
    bool ok = last() == cudaSuccess;
    for (int t = 0; t < 128; ++t) ok &= out[t] == (127 - t) * 3;
    expect(ok, "dynamic shared memory");
  }
  {
    volatile float a = 1.0f + 1.0f / 8192, b = 1.0f + 1.0f / 4096;  // a*a = 1 + 2^-12 + 2^-26 exactly
    const float in[2] = {a, b};
    float out[3] = {1, 1, 1};
    rounding_kernel<<<1, 1>>>(in, out);
    cudaDeviceSynchronize();
    expect(out[0] == 0.f && out[1] == 0.f, "products are rounded before the subtraction (no FMA contraction)");
    expect(out[2] == 1.0f / 67108864, "__fmaf_rn rounds once");
  }
  take_launches();
  std::printf("self-test: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed;
}

}  // namespace gdsio_emu
