// The CPU twin of the colour kernels (color_cuda.cu): the arithmetic is
// color.hpp's; this file checks the batch and schedules the work on gdsio's
// thread pool, summing the contrast means in the kernels' order.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"
#include "io/thread_pool.hpp"

namespace gdsio::image {

namespace {

const char* op_name(ColorOp op) {
  switch (op) {
    case ColorOp::kBrightness: return "brightness";
    case ColorOp::kContrast: return "contrast";
    case ColorOp::kSaturation: return "saturation";
    case ColorOp::kHue: return "hue";
    default: return "none";
  }
}

// One band's sum of the contrast terms, lane by lane then as a tree: the
// order of color_cuda's band kernel (one thread per lane).
template <PixelType T, int C>
double band_sum(const ColorImage& im, int band, int first_contrast) {
  double lane[kColorLanes] = {};
  const int y0 = band * im.band_rows, y1 = std::min(im.height, y0 + im.band_rows);
  float v[C];
  for (int y = y0; y < y1; ++y) {
    for (int x = 0; x < im.width; ++x) {
      px::load_pixel(im, T, C, y, x, v);
      px::color_ops(im, T, C, 0, first_contrast, v, 0.f);
      lane[x % kColorLanes] += (double)px::contrast_term(T, C, v);
    }
  }
  for (int s = kColorLanes / 2; s > 0; s >>= 1)
    for (int i = 0; i < s; ++i) lane[i] += lane[i + s];
  return lane[0];
}

template <PixelType T, int C>
void color_rows(const ColorImage& im, float mean, int y0, int y1) {
  float v[C];
  for (int y = y0; y < y1; ++y) {
    for (int x = 0; x < im.width; ++x) {
      px::load_pixel(im, T, C, y, x, v);
      px::color_ops(im, T, C, 0, kMaxColorOps, v, mean);
      px::store_pixel(im, T, C, y, x, v);
    }
  }
}

template <PixelType T, int C>
void run_color(const std::vector<ColorImage>& images, std::size_t threads) {
  // 1. The contrast sums, per (image, band).
  std::vector<std::pair<std::size_t, int>> band_items;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    for (int b = 0; b < images[i].bands; ++b) band_items.emplace_back(i, b);
    total += images[i].bands;
  }
  std::vector<double> sums((std::size_t)total);
  parallel_for(band_items.size(), threads, [&](std::size_t, WorkQueue& q) {
    std::size_t k;
    while (q.claim(&k)) {
      const auto [i, b] = band_items[k];
      const ColorImage& im = images[i];
      sums[(std::size_t)(im.sum_offset + b)] = band_sum<T, C>(im, b, px::contrast_position(im));
    }
  });
  // 2. The means: the bands added in order.
  std::vector<float> means(images.size(), 0.f);
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ColorImage& im = images[i];
    if (im.bands == 0) continue;
    double s = 0;
    for (int b = 0; b < im.bands; ++b) s += sums[(std::size_t)(im.sum_offset + b)];
    means[i] = px::mean_of(T, s, (std::int64_t)im.height * im.width);
  }
  // 3. The pixels, in items of about 64K pixels.
  std::vector<std::array<std::int64_t, 3>> items;  // (image, y0, y1)
  for (std::size_t i = 0; i < images.size(); ++i) {
    const int rows = (int)std::max<std::int64_t>(1, (1 << 16) / images[i].width);
    for (int y = 0; y < images[i].height; y += rows)
      items.push_back({(std::int64_t)i, y, std::min(images[i].height, y + rows)});
  }
  parallel_for(items.size(), threads, [&](std::size_t, WorkQueue& q) {
    std::size_t k;
    while (q.claim(&k)) {
      const auto& it = items[k];
      color_rows<T, C>(images[(std::size_t)it[0]], means[(std::size_t)it[0]], (int)it[1], (int)it[2]);
    }
  });
}

template <int C>
void run_color_type(const std::vector<ColorImage>& images, PixelType t, std::size_t threads) {
  switch (t) {
    case PixelType::kU8: run_color<PixelType::kU8, C>(images, threads); break;
    case PixelType::kF32: run_color<PixelType::kF32, C>(images, threads); break;
    case PixelType::kF16: run_color<PixelType::kF16, C>(images, threads); break;
    default: run_color<PixelType::kBF16, C>(images, threads); break;
  }
}

}  // namespace

std::size_t plan_color(std::vector<ColorImage>& images, const ColorSpec& spec) {
  GDSIO_EXPECT(!images.empty(), ValueError, "images: the batch is empty");
  GDSIO_EXPECT(spec.channels == 1 || spec.channels == 3, ValueError,
               "images: the colour ops take 1 or 3 channels (torchvision's rule), got ", spec.channels);
  GDSIO_EXPECT(spec.type == PixelType::kU8 || spec.type == PixelType::kF32 || spec.type == PixelType::kF16 ||
                   spec.type == PixelType::kBF16,
               ValueError, "dtype: the colour ops take uint8, float32, float16 or bfloat16");
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    ColorImage& im = images[i];
    GDSIO_EXPECT(im.src != 0 && im.dst != 0, ValueError, "images[", i, "]: null data pointer");
    GDSIO_EXPECT(im.height >= 1 && im.width >= 1, ValueError, "images[", i, "]: empty image (", im.height, "x",
                 im.width, ")");
    GDSIO_EXPECT(im.row_stride >= im.width && (spec.channels == 1 || im.channel_stride >= 1), ValueError,
                 "images[", i, "]: bad strides (row ", im.row_stride, ", channel ", im.channel_stride, ")");
    int contrasts = 0;
    for (int k = 0; k < kMaxColorOps; ++k) {
      const ColorOp op = im.ops[k];
      const float f = im.factor[k];
      GDSIO_EXPECT((int)op >= 0 && (int)op <= (int)ColorOp::kHue, ValueError, "images[", i, "]: unknown colour op ",
                   (int)op);
      if (op == ColorOp::kNone) continue;
      GDSIO_EXPECT(std::isfinite(f), ValueError, "images[", i, "]: ", op_name(op), " factor ", f, " is not finite");
      if (op == ColorOp::kHue)
        GDSIO_EXPECT(f >= -0.5f && f <= 0.5f, ValueError, "images[", i, "]: hue factor ", f,
                     " is not in [-0.5, 0.5]");
      else
        GDSIO_EXPECT(f >= 0.f, ValueError, "images[", i, "]: ", op_name(op), " factor ", f, " is negative");
      contrasts += op == ColorOp::kContrast;
    }
    GDSIO_EXPECT(contrasts <= 1, ValueError, "images[", i, "]: at most one contrast op per image");
    im.band_rows = (int)std::min<std::int64_t>(im.height, std::max<std::int64_t>(1, kColorBandPixels / im.width));
    im.bands = contrasts ? (im.height + im.band_rows - 1) / im.band_rows : 0;
    im.sum_offset = offset;
    offset += im.bands;
  }
  return (std::size_t)offset * sizeof(double) + images.size() * sizeof(float);
}

void color_cpu(std::vector<ColorImage> images, const ColorSpec& spec, std::size_t threads) {
  plan_color(images, spec);
  if (threads < 1) threads = 1;
  if (spec.channels == 1)
    run_color_type<1>(images, spec.type, threads);
  else
    run_color_type<3>(images, spec.type, threads);
}

#ifndef GDSIO_WITH_CUDA
void color_cuda(std::vector<ColorImage>, const ColorSpec&, std::uintptr_t, std::size_t, int, std::uintptr_t) {
  throw_no_cuda();
}
#endif

}  // namespace gdsio::image
