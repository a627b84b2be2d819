// The GPU path of the uncompressed decoders: bytes already in device memory
// (what gdsio.read put there) become (C,H,W) tensors without a round trip
// through the host. Many images share one launch: the jobs travel by value as
// one __grid_constant__ kernel parameter, each image gets a contiguous range
// of blocks, and a block finds its image by binary search over the ranges.
#include <algorithm>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/decode.hpp"
#include "image/pixel_formats.hpp"

namespace gdsio::image {

namespace {

constexpr int kThreads = 256;
constexpr int kPixelsPerThread = 4;
constexpr std::int64_t kPixelsPerBlock = std::int64_t{kThreads} * kPixelsPerThread;

struct LaunchBatch {
  PixelJob jobs[kJobsPerLaunch];
  std::int64_t first_block[kJobsPerLaunch + 1];  // job k owns blocks [first_block[k], first_block[k+1])
  std::int32_t count;
};
// CUDA 12.1+ on Volta and newer takes up to 32764 bytes of kernel parameters.
static_assert(sizeof(LaunchBatch) <= 32000, "LaunchBatch must fit in one kernel parameter");

__global__ void __launch_bounds__(kThreads) decode_pixels_kernel(const __grid_constant__ LaunchBatch b) {
  const std::int64_t block = blockIdx.x;
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {  // the last job whose range starts at or before this block
    const int mid = (lo + hi + 1) / 2;
    if (b.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  const PixelJob& j = b.jobs[lo];
  const std::int64_t npix = j.height * j.width;
  const std::int64_t start = (block - b.first_block[lo]) * kPixelsPerBlock + threadIdx.x;
  const bool narrow = npix <= 0xFFFFFFFFll;  // 32-bit division where it suffices (uniform per block)
  // One specialisation per job type; a block serves one job, so no divergence.
  px::with_job_types(j, [&](auto s, auto c) {
#pragma unroll
    for (int k = 0; k < kPixelsPerThread; ++k) {
      const std::int64_t p = start + std::int64_t{k} * kThreads;
      if (p >= npix) return;
      const std::int64_t y = narrow ? static_cast<std::int64_t>(static_cast<std::uint32_t>(p) /
                                                                static_cast<std::uint32_t>(j.width))
                                    : p / j.width;
      px::decode_pixel<decltype(s)::value, decltype(c)::value>(j, y, p - y * j.width);
    }
  });
}

// DeviceGuard: gdsio::DeviceGuard (core/cuda_rt.hpp) makes `device` current and
// restores the caller's, which torch reads back.
using ::gdsio::DeviceGuard;

}  // namespace

std::size_t decode_pixels_cuda(const std::vector<PixelJob>& jobs, int device, std::uintptr_t stream) {
  for (std::size_t i = 0; i < jobs.size(); ++i) validate_pixel_job(jobs[i], i);
  if (jobs.empty()) return 0;
  DeviceGuard guard(device);  // throws Unavailable / ValueError for a device that is not there
  auto s = reinterpret_cast<cudaStream_t>(stream);
  std::size_t launches = 0;
  LaunchBatch batch;
  for (std::size_t first = 0; first < jobs.size(); first += kJobsPerLaunch) {
    const std::size_t n = std::min(kJobsPerLaunch, jobs.size() - first);
    std::int64_t blocks = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const PixelJob& j = jobs[first + k];
      batch.jobs[k] = j;
      batch.first_block[k] = blocks;
      blocks += (j.height * j.width + kPixelsPerBlock - 1) / kPixelsPerBlock;
    }
    batch.first_block[n] = blocks;
    batch.count = static_cast<std::int32_t>(n);
    GDSIO_EXPECT(blocks < (std::int64_t{1} << 31), ValueError, "jobs ", first, "..", first + n - 1, " need ",
                 blocks, " blocks, more than one launch takes");
    decode_pixels_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(batch);
    GDSIO_CUDA_CHECK(cudaGetLastError(), "decode_pixels_kernel launch (jobs ", first, "..", first + n - 1,
                     " on cuda:", device, ")");
    ++launches;
  }
  return launches;
}

}  // namespace gdsio::image
