// CUDA kernel of pad and its host launcher: a thread per output element,
// pad.hpp's index rule (shared with the CPU twin, pad_cpu.cpp) per axis.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace gdsio::image {

namespace {

// grid.z walks planes, grid.y rows, grid.x columns (each with a stride loop).
template <typename E>
__global__ void pad_kernel(const E* in, E* out, const __grid_constant__ PadSpec s) {
  const std::int64_t oh = s.rows.out(), ow = s.cols.out(), ih = s.rows.in, iw = s.cols.in;
  for (std::int64_t p = blockIdx.z; p < s.planes; p += gridDim.z) {
    const std::uint64_t bits = s.fill_of(p);
    E fill;
    memcpy(&fill, &bits, sizeof(E));
    for (std::int64_t y = blockIdx.y * (std::int64_t)blockDim.y + threadIdx.y; y < oh;
         y += (std::int64_t)gridDim.y * blockDim.y) {
      const std::int64_t sy = pad_source(s.rows, s.mode, y);
      for (std::int64_t x = blockIdx.x * (std::int64_t)blockDim.x + threadIdx.x; x < ow;
           x += (std::int64_t)gridDim.x * blockDim.x) {
        const std::int64_t sx = sy < 0 ? -1 : pad_source(s.cols, s.mode, x);
        out[(p * oh + y) * ow + x] = sx < 0 ? fill : in[(p * ih + sy) * iw + sx];
      }
    }
  }
}

unsigned capped(std::int64_t n, int block, std::int64_t cap) {
  return (unsigned)std::max<std::int64_t>(1, std::min<std::int64_t>((n + block - 1) / block, cap));
}

}  // namespace

void pad_cuda(std::uintptr_t in, std::uintptr_t out, const PadSpec& s, int device, std::uintptr_t stream) {
  check_pad(s);
  if (s.planes == 0) return;
  GDSIO_EXPECT(in != 0 && out != 0 && in != out, ValueError, "pad: null or identical input and output");
  ::gdsio::DeviceGuard scope(device);
  const dim3 block(32, 8);
  const dim3 grid(capped(s.cols.out(), 32, 1024), capped(s.rows.out(), 8, 1024), capped(s.planes, 1, 65535));
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  switch (s.elem_size) {
    case 1:
      pad_kernel<<<grid, block, 0, st>>>(reinterpret_cast<const std::uint8_t*>(in), reinterpret_cast<std::uint8_t*>(out), s);
      break;
    case 2:
      pad_kernel<<<grid, block, 0, st>>>(reinterpret_cast<const std::uint16_t*>(in), reinterpret_cast<std::uint16_t*>(out), s);
      break;
    case 4:
      pad_kernel<<<grid, block, 0, st>>>(reinterpret_cast<const std::uint32_t*>(in), reinterpret_cast<std::uint32_t*>(out), s);
      break;
    default:
      pad_kernel<<<grid, block, 0, st>>>(reinterpret_cast<const std::uint64_t*>(in), reinterpret_cast<std::uint64_t*>(out), s);
      break;
  }
  GDSIO_CUDA_CHECK(cudaGetLastError(), "pad: launching the kernel");
}

}  // namespace gdsio::image
