// CUDA kernels of the transforms and their host launchers. The arithmetic
// is resample.hpp's, shared with the CPU twin (transforms_cpu.cpp), which
// is these kernels' test oracle: uint8 results are identical bit for bit.
//
// A batch (a list of images of different sizes, or crops of them) travels
// as a kernel parameter: a table of per-image pointers, strides and sizes
// (up to kMaxImagesPerLaunch images; CUDA 12.1+ allows 32 KiB of
// parameters), so a whole batch is one launch per stage and no descriptor
// is copied to the device. Stages: one small kernel computes every filter
// window into the workspace; one kernel does both resampling passes and
// the epilogue (crop, flip, scale, normalize, cast are all folded in).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace gdsio::image {

namespace {

using px::clampi;

// ---- launch parameters -------------------------------------------------------------
struct DevImage {
  const std::uint8_t* src;      // channel 0, top-left of the crop
  std::int64_t channel_stride;  // elements
  std::int64_t row_stride;
  std::int64_t coef;            // int32 offset of this image's windows in the workspace
  std::int32_t in_h, in_w;
  std::int32_t ksize_h, ksize_v;
  std::int32_t flip;
};

template <int Cap>
struct Batch {
  DevImage img[Cap];
};

struct Common {
  std::int32_t* coeffs;  // the workspace
  void* out;             // (count, C, out_h, out_w) of epilogue.out, for this launch's images
  std::int32_t count;    // images in this launch
  std::int32_t channels, out_h, out_w;
  Filter filter;
  Reference ref;
  px::Epilogue ep;
};

constexpr int kSmallBatch = 32;
static_assert(sizeof(Batch<kMaxImagesPerLaunch>) + sizeof(Common) < 32000,
              "the image table must fit CUDA's 32 KiB of kernel parameters");

// The resample tile: 32 output columns x 32 output rows per block of 32x8
// threads (4 rows each); source rows go through shared memory 64 at a time,
// so a block handles any downscale factor (4000 -> 7 is 63 chunks).
constexpr int kTileW = 32;
constexpr int kThreadsY = 8;
constexpr int kRowsPerThread = 4;
constexpr int kTileH = kThreadsY * kRowsPerThread;
constexpr int kChunkRows = 64;
constexpr int kBlock = kTileW * kThreadsY;

__device__ __forceinline__ std::int64_t out_index(const Common& c, int n, int ch, int y, int x) {
  return (((std::int64_t)n * c.channels + ch) * c.out_h + y) * c.out_w + x;
}

// ---- stage 1: the windows ----------------------------------------------------------
// One thread per (image, output column or row), writing the same layout
// px::axis_coeffs writes on the host.
template <int Cap>
__global__ void windows_kernel(const __grid_constant__ Batch<Cap> b, const __grid_constant__ Common c) {
  const DevImage& im = b.img[blockIdx.y];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= c.out_w + c.out_h) return;
  const px::Axis h{im.in_w, c.out_w, c.filter, c.ref, false};
  std::int32_t* co = c.coeffs + im.coef;
  if (i < c.out_w) {
    px::axis_window(h, i, im.ksize_h, co + 2 * i, co + 2 * (std::int64_t)c.out_w + (std::int64_t)i * im.ksize_h);
  } else {
    const int j = i - c.out_w;
    const px::Axis v{im.in_h, c.out_h, c.filter, c.ref, true};
    std::int32_t* cv = co + px::axis_ints(h, im.ksize_h);
    px::axis_window(v, j, im.ksize_v, cv + 2 * j, cv + 2 * (std::int64_t)c.out_h + (std::int64_t)j * im.ksize_v);
  }
}

// ---- stage 2: both passes and the epilogue -------------------------------------------
template <int Cap, Arith A>
__global__ void __launch_bounds__(kBlock) resample_kernel(const __grid_constant__ Batch<Cap> b,
                                                           const __grid_constant__ Common c) {
  __shared__ int inter[kChunkRows][kTileW];
  const int n = blockIdx.z / c.channels, ch = blockIdx.z % c.channels;
  const DevImage& im = b.img[n];
  const int out_w = c.out_w, out_h = c.out_h;
  const int x0 = blockIdx.x * kTileW, y0 = blockIdx.y * kTileH;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kTileW + tx;
  const int in_h = im.in_h;

  const std::int32_t* hb = c.coeffs + im.coef;
  const std::int32_t* hw = hb + 2 * (std::int64_t)out_w;
  const std::int32_t* vb = hb + (std::int64_t)out_w * (2 + im.ksize_h);
  const std::int32_t* vw = vb + 2 * (std::int64_t)out_h;
  const std::uint8_t* src = im.src + ch * im.channel_stride;

  const int y_last = min(y0 + kTileH, out_h) - 1;
  const int lo = clampi(vb[2 * y0], 0, in_h - 1);
  const int hi = clampi(vb[2 * y_last] + vb[2 * y_last + 1] - 1, 0, in_h - 1) + 1;
  const int ox = x0 + tx;

  int acc[kRowsPerThread];
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) acc[j] = px::v_init(A);

  for (int c0 = lo; c0 < hi; c0 += kChunkRows) {
    const int rows = min(kChunkRows, hi - c0);
    // Horizontal pass of source rows [c0, c0 + rows) for the tile's columns.
    for (int e = tid; e < rows * kTileW; e += kBlock) {
      const int r = e / kTileW, x = e % kTileW, gx = x0 + x;
      int v = 0;
      if (gx < out_w) {
        const std::uint8_t* sp = src + (std::int64_t)(c0 + r) * im.row_stride + hb[2 * gx];
        const int cnt = hb[2 * gx + 1];
        const std::int32_t* w = hw + (std::int64_t)gx * im.ksize_h;
        int ss = px::h_init(A);
        for (int k = 0; k < cnt; ++k) ss += sp[k] * w[k];
        v = px::h_finish(A, ss);
      }
      inter[r][x] = v;
    }
    __syncthreads();
    // Vertical pass: each thread adds the chunk's rows of its windows.
    if (ox < out_w) {
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        const int oy = y0 + ty + j * kThreadsY;
        if (oy > y_last) break;
        const int start = vb[2 * oy], cnt = vb[2 * oy + 1];
        const std::int32_t* w = vw + (std::int64_t)oy * im.ksize_v;
        if (A == Arith::kPillow8) {
          // Pillow's windows lie inside the image: intersect with the chunk.
          const int k1 = min(cnt, c0 + rows - start);
          for (int k = max(0, c0 - start); k < k1; ++k) acc[j] += px::v_term(A, inter[start + k - c0][tx], w[k]);
        } else {
          // OpenCV's vertical taps may reach past the edge; rows are clamped.
          for (int k = 0; k < cnt; ++k) {
            const int r = clampi(start + k, 0, in_h - 1) - c0;
            if (r >= 0 && r < rows) acc[j] += px::v_term(A, inter[r][tx], w[k]);
          }
        }
      }
    }
    __syncthreads();
  }

  if (ox >= out_w) return;
  const int dx = im.flip ? out_w - 1 - ox : ox;
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int oy = y0 + ty + j * kThreadsY;
    if (oy > y_last) break;
    px::store_resampled(c.ep, c.out, out_index(c, n, ch, oy, dx), ch, px::v_finish(A, acc[j]));
  }
}

// Nearest: one tap per axis, a gather (the same bytes the two passes give).
template <int Cap>
__global__ void nearest_kernel(const __grid_constant__ Batch<Cap> b, const __grid_constant__ Common c) {
  const int n = blockIdx.z / c.channels, ch = blockIdx.z % c.channels;
  const DevImage& im = b.img[n];
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= c.out_w || y >= c.out_h) return;
  const std::int32_t* hb = c.coeffs + im.coef;
  const std::int32_t* vb = hb + (std::int64_t)c.out_w * (2 + im.ksize_h);
  const int sy = clampi(vb[2 * y], 0, im.in_h - 1);
  const int u = im.src[ch * im.channel_stride + (std::int64_t)sy * im.row_stride + hb[2 * x]];
  px::store_resampled(c.ep, c.out, out_index(c, n, ch, y, im.flip ? c.out_w - 1 - x : x), ch, u);
}

// ---- host side ---------------------------------------------------------------------------
// Makes `device` current for the launch and restores the caller's device.
using DeviceScope = ::gdsio::DeviceGuard;

cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

unsigned blocks_for(std::int64_t n, int block, unsigned cap = 65535) {
  return (unsigned)std::max<std::int64_t>(1, std::min<std::int64_t>((n + block - 1) / block, cap));
}

std::size_t elem_size(PixelType t) { return t == PixelType::kU8 ? 1 : t == PixelType::kF32 ? 4 : 2; }

template <int Cap>
void launch_resize(const std::vector<ImageRef>& images, const std::vector<detail::ImagePlan>& plans,
                   std::size_t first, std::size_t count, const Common& common, cudaStream_t stream) {
  Batch<Cap> b{};
  for (std::size_t k = 0; k < count; ++k) {
    const ImageRef& r = images[first + k];
    const detail::ImagePlan& p = plans[first + k];
    b.img[k] = DevImage{reinterpret_cast<const std::uint8_t*>(r.data), r.channel_stride, r.row_stride, p.offset,
                        r.height, r.width, p.ksize_h, p.ksize_v, r.flip ? 1 : 0};
  }
  const int max_len = common.out_w + common.out_h;
  const unsigned zc = (unsigned)(count * common.channels);

  windows_kernel<Cap><<<dim3(blocks_for(max_len, 128), (unsigned)count), 128, 0, stream>>>(b, common);
  GDSIO_CUDA_CHECK(cudaGetLastError(), "resize: launching the window kernel");

  if (common.filter == Filter::kNearest) {
    const dim3 grid((common.out_w + 31) / 32, (common.out_h + 7) / 8, zc);
    nearest_kernel<Cap><<<grid, dim3(32, 8), 0, stream>>>(b, common);
  } else {
    const dim3 grid((common.out_w + kTileW - 1) / kTileW, (common.out_h + kTileH - 1) / kTileH, zc);
    const dim3 block(kTileW, kThreadsY);
    if (common.ref == Reference::kOpenCV)
      resample_kernel<Cap, Arith::kOpenCV8><<<grid, block, 0, stream>>>(b, common);
    else
      resample_kernel<Cap, Arith::kPillow8><<<grid, block, 0, stream>>>(b, common);
  }
  GDSIO_CUDA_CHECK(cudaGetLastError(), "resize: launching the resample kernel");
}

}  // namespace

void resize_cuda(const std::vector<ImageRef>& images, const ResizeSpec& spec, std::uintptr_t out,
                 std::uintptr_t workspace, std::size_t workspace_bytes, int device, std::uintptr_t stream) {
  check_resize(images, spec);
  GDSIO_EXPECT(out != 0, ValueError, "out: null pointer");
  const auto plans = detail::plan_resize(images, spec);
  const std::size_t need = (std::size_t)(plans.back().offset + plans.back().ints) * sizeof(std::int32_t);
  GDSIO_EXPECT(workspace != 0 && workspace_bytes >= need, ValueError, "workspace: ", workspace_bytes,
               " bytes given, ", need, " needed");
  DeviceScope scope(device);

  Common common{};
  common.coeffs = reinterpret_cast<std::int32_t*>(workspace);
  common.channels = spec.channels;
  common.out_h = spec.out_h;
  common.out_w = spec.out_w;
  common.filter = spec.filter;
  common.ref = spec.ref;
  common.ep = spec.epilogue;
  const std::size_t image_bytes =
      (std::size_t)spec.channels * spec.out_h * spec.out_w * elem_size(spec.epilogue.out);
  for (std::size_t first = 0; first < images.size(); first += kMaxImagesPerLaunch) {
    const std::size_t count = std::min(kMaxImagesPerLaunch, images.size() - first);
    common.out = reinterpret_cast<std::uint8_t*>(out) + first * image_bytes;
    common.count = (std::int32_t)count;
    if (count <= (std::size_t)kSmallBatch)
      launch_resize<kSmallBatch>(images, plans, first, count, common, as_stream(stream));
    else
      launch_resize<kMaxImagesPerLaunch>(images, plans, first, count, common, as_stream(stream));
  }
}

}  // namespace gdsio::image
