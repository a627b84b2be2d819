// CUDA kernels of the colour ops and their host launcher. The arithmetic is
// color.hpp's, shared with the CPU twin (color_cpu.cpp), which is these
// kernels' test oracle: outputs are identical bit for bit.
//
// A batch travels as a kernel parameter (a table of up to
// kMaxColorImagesPerLaunch images, each with its own ops and factors), so a
// whole batch is one launch per stage: the contrast sums (a block per band
// of rows, a thread per lane, then a tree in shared memory), the means (a
// thread per image adds its bands in order), the pixels (a thread per pixel,
// every op of the image in its order).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace gdsio::image {

namespace {

struct ColorBatch {
  ColorImage img[kMaxColorImagesPerLaunch];
};

struct ColorCommon {
  double* sums;  // the workspace: every band's sum
  float* means;  // this launch's images' contrast means
  std::int32_t count;
};

static_assert(sizeof(ColorBatch) + sizeof(ColorCommon) < 32000,
              "the image table must fit CUDA's 32 KiB of kernel parameters");

template <PixelType T, int C>
__global__ void __launch_bounds__(kColorLanes) band_kernel(const __grid_constant__ ColorBatch b,
                                                           const __grid_constant__ ColorCommon c) {
  __shared__ double lane[kColorLanes];
  const ColorImage& im = b.img[blockIdx.y];
  const int band = blockIdx.x;
  if (band >= im.bands) return;  // the whole block leaves together
  const int first_contrast = px::contrast_position(im);
  const int t = threadIdx.x;
  const int y0 = band * im.band_rows, y1 = min(im.height, y0 + im.band_rows);
  double acc = 0;
  float v[C];
  for (int y = y0; y < y1; ++y) {
    for (int x = t; x < im.width; x += kColorLanes) {
      px::load_pixel(im, T, C, y, x, v);
      px::color_ops(im, T, C, 0, first_contrast, v, 0.f);
      acc = px::dadd(acc, (double)px::contrast_term(T, C, v));
    }
  }
  lane[t] = acc;
  __syncthreads();
  for (int s = kColorLanes / 2; s > 0; s >>= 1) {
    if (t < s) lane[t] = px::dadd(lane[t], lane[t + s]);
    __syncthreads();
  }
  if (t == 0) c.sums[im.sum_offset + band] = lane[0];
}

template <PixelType T>
__global__ void mean_kernel(const __grid_constant__ ColorBatch b, const __grid_constant__ ColorCommon c) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= c.count) return;
  const ColorImage& im = b.img[n];
  if (im.bands == 0) return;
  double s = 0;
  for (int k = 0; k < im.bands; ++k) s = px::dadd(s, c.sums[im.sum_offset + k]);
  c.means[n] = px::mean_of(T, s, (std::int64_t)im.height * im.width);
}

template <PixelType T, int C>
__global__ void color_kernel(const __grid_constant__ ColorBatch b, const __grid_constant__ ColorCommon c) {
  const ColorImage& im = b.img[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= im.width) return;
  const float mean = im.bands ? c.means[blockIdx.z] : 0.f;
  float v[C];
  for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < im.height; y += gridDim.y * blockDim.y) {
    px::load_pixel(im, T, C, y, x, v);
    px::color_ops(im, T, C, 0, kMaxColorOps, v, mean);
    px::store_pixel(im, T, C, y, x, v);
  }
}

template <PixelType T, int C>
void launch(const ColorBatch& b, const ColorCommon& c, int max_bands, int max_h, int max_w, cudaStream_t stream) {
  if (max_bands > 0) {
    band_kernel<T, C><<<dim3((unsigned)max_bands, (unsigned)c.count), kColorLanes, 0, stream>>>(b, c);
    GDSIO_CUDA_CHECK(cudaGetLastError(), "colour ops: launching the contrast sum kernel");
    mean_kernel<T><<<(unsigned)((c.count + 127) / 128), 128, 0, stream>>>(b, c);
    GDSIO_CUDA_CHECK(cudaGetLastError(), "colour ops: launching the mean kernel");
  }
  const dim3 block(32, 8);
  const dim3 grid((unsigned)((max_w + 31) / 32), (unsigned)std::min(65535, (max_h + 7) / 8), (unsigned)c.count);
  color_kernel<T, C><<<grid, block, 0, stream>>>(b, c);
  GDSIO_CUDA_CHECK(cudaGetLastError(), "colour ops: launching the pixel kernel");
}

template <int C>
void launch_type(PixelType t, const ColorBatch& b, const ColorCommon& c, int max_bands, int max_h, int max_w,
                 cudaStream_t s) {
  switch (t) {
    case PixelType::kU8: launch<PixelType::kU8, C>(b, c, max_bands, max_h, max_w, s); break;
    case PixelType::kF32: launch<PixelType::kF32, C>(b, c, max_bands, max_h, max_w, s); break;
    case PixelType::kF16: launch<PixelType::kF16, C>(b, c, max_bands, max_h, max_w, s); break;
    default: launch<PixelType::kBF16, C>(b, c, max_bands, max_h, max_w, s); break;
  }
}

}  // namespace

void color_cuda(std::vector<ColorImage> images, const ColorSpec& spec, std::uintptr_t workspace,
                std::size_t workspace_bytes, int device, std::uintptr_t stream) {
  const std::size_t need = plan_color(images, spec);
  GDSIO_EXPECT(workspace != 0 && workspace_bytes >= need, ValueError, "workspace: ", workspace_bytes,
               " bytes given, ", need, " needed");
  ::gdsio::DeviceGuard scope(device);
  std::int64_t total_bands = 0;
  for (const auto& im : images) total_bands += im.bands;
  auto* sums = reinterpret_cast<double*>(workspace);
  auto* means = reinterpret_cast<float*>(workspace + (std::size_t)total_bands * sizeof(double));
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);

  auto batch = std::make_unique<ColorBatch>();  // 24 KiB: off the stack
  for (std::size_t first = 0; first < images.size(); first += kMaxColorImagesPerLaunch) {
    const std::size_t count = std::min(kMaxColorImagesPerLaunch, images.size() - first);
    int max_bands = 0, max_h = 0, max_w = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const ColorImage& im = images[first + k];
      batch->img[k] = im;
      max_bands = std::max(max_bands, im.bands);
      max_h = std::max(max_h, im.height);
      max_w = std::max(max_w, im.width);
    }
    const ColorCommon common{sums, means + first, (std::int32_t)count};
    if (spec.channels == 1)
      launch_type<1>(spec.type, *batch, common, max_bands, max_h, max_w, st);
    else
      launch_type<3>(spec.type, *batch, common, max_bands, max_h, max_w, st);
  }
}

}  // namespace gdsio::image
