// The CPU twin of the colour kernels (color_cuda.cu): the arithmetic is
// color.hpp's; this file checks the batch and schedules the work on gdsio's
// thread pool, summing the contrast means in the kernels' order.

// GCC (unlike clang) assumes by default that float ops may trap, so it never
// turns a conditional conversion or division into a select and the row
// loops stay scalar. Nothing here reads the floating-point flags, and the
// option changes no result (IEEE non-stop arithmetic either way).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
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

constexpr std::size_t elem_bytes(PixelType t) { return t == PixelType::kU8 ? 1 : t == PixelType::kF32 ? 4 : 2; }

const char* op_name(ColorOp op) {
  switch (op) {
    case ColorOp::kBrightness: return "brightness";
    case ColorOp::kContrast: return "contrast";
    case ColorOp::kSaturation: return "saturation";
    case ColorOp::kHue: return "hue";
    default: return "none";
  }
}

// The ops over one row of planes, each loop in a function of its own (kept
// out of line: inlined into the schedulers' loops, GCC no longer vectorises
// them). The per-value functions are the kernels' (color.hpp).
#define GDSIO_ROW_FN template <PixelType T> __attribute__((noinline)) void
GDSIO_ROW_FN row_load(const void* src, float* __restrict d, int w) {
  if constexpr (T == PixelType::kU8) {
    const std::uint8_t* __restrict p = static_cast<const std::uint8_t*>(src);
    for (int x = 0; x < w; ++x) d[x] = (float)p[x];
  } else if constexpr (T == PixelType::kF32) {
    const float* __restrict p = static_cast<const float*>(src);
    for (int x = 0; x < w; ++x) d[x] = p[x];
  } else {
    for (int x = 0; x < w; ++x) d[x] = px::load_as_float(T, src, x);
  }
}
GDSIO_ROW_FN row_store(const float* __restrict s, void* dst, int w) {
  if constexpr (T == PixelType::kU8) {  // values are integers in [0, 255]
    std::uint8_t* __restrict p = static_cast<std::uint8_t*>(dst);
    for (int x = 0; x < w; ++x) p[x] = (std::uint8_t)(int)s[x];
  } else if constexpr (T == PixelType::kF32) {
    float* __restrict p = static_cast<float*>(dst);
    for (int x = 0; x < w; ++x) p[x] = s[x];
  } else {
    for (int x = 0; x < w; ++x) px::store_float(T, dst, x, s[x]);
  }
}
GDSIO_ROW_FN row_brightness(float* __restrict v, int w, float f) {
  for (int x = 0; x < w; ++x) v[x] = px::brightness(T, v[x], f);
}
GDSIO_ROW_FN row_blend_const(float* __restrict v, int w, float y, float f, float g) {
  for (int x = 0; x < w; ++x) v[x] = px::blend(T, v[x], y, f, g);
}
GDSIO_ROW_FN row_saturation(float* __restrict r, float* __restrict gg, float* __restrict b, int w, float f,
                            float g) {
  for (int x = 0; x < w; ++x) {
    const float l = px::gray(T, r[x], gg[x], b[x]);
    r[x] = px::blend(T, r[x], l, f, g);
    gg[x] = px::blend(T, gg[x], l, f, g);
    b[x] = px::blend(T, b[x], l, f, g);
  }
}
GDSIO_ROW_FN row_hue(float* __restrict r, float* __restrict gg, float* __restrict b, int w, float f) {
  for (int x = 0; x < w; ++x) px::hue(T, r[x], gg[x], b[x], f);
}
GDSIO_ROW_FN row_gray(const float* __restrict r, const float* __restrict gg, const float* __restrict b,
                      float* __restrict l, int w) {
  for (int x = 0; x < w; ++x) l[x] = px::gray(T, r[x], gg[x], b[x]);
}
#undef GDSIO_ROW_FN

// A row of each channel as floats, and a row of contrast terms.
template <PixelType T, int C>
struct Rows {
  std::vector<float> buf;
  float* ch[C];
  float* term;

  explicit Rows(int width) : buf((std::size_t)width * (C + 1)) {
    for (int c = 0; c < C; ++c) ch[c] = buf.data() + (std::size_t)c * width;
    term = buf.data() + (std::size_t)C * width;
  }

  void load(const ColorImage& im, int y) {
    const std::size_t es = elem_bytes(T);
    for (int c = 0; c < C; ++c)
      row_load<T>(reinterpret_cast<const std::uint8_t*>(im.src) + (c * im.channel_stride + (std::int64_t)y * im.row_stride) * es,
                  ch[c], im.width);
  }

  void store(const ColorImage& im, int y) const {
    const std::size_t es = elem_bytes(T);
    const std::int64_t plane = (std::int64_t)im.height * im.width;
    for (int c = 0; c < C; ++c)
      row_store<T>(ch[c], reinterpret_cast<std::uint8_t*>(im.dst) + (c * plane + (std::int64_t)y * im.width) * es,
                   im.width);
  }

  // Ops [first, last) of the image over the row, as px::color_ops does per pixel.
  void ops(const ColorImage& im, int first, int last, float mean) {
    const int w = im.width;
    for (int k = first; k < last; ++k) {
      const float f = im.factor[k], g = im.one_minus[k];
      switch (im.ops[k]) {
        case ColorOp::kBrightness:
          for (int c = 0; c < C; ++c) row_brightness<T>(ch[c], w, f);
          break;
        case ColorOp::kContrast:
          for (int c = 0; c < C; ++c) row_blend_const<T>(ch[c], w, mean, f, g);
          break;
        case ColorOp::kSaturation:
          if constexpr (C == 3) row_saturation<T>(ch[0], ch[1], ch[2], w, f, g);
          break;
        case ColorOp::kHue:
          if constexpr (C == 3) row_hue<T>(ch[0], ch[1], ch[2], w, f);
          break;
        default: break;
      }
    }
  }

  // The contrast terms of the row (px::contrast_term).
  const float* terms(int w) {
    if constexpr (C == 3) {
      row_gray<T>(ch[0], ch[1], ch[2], term, w);
      return term;
    } else {
      return ch[0];
    }
  }
};

// One band's sum of the contrast terms, lane by lane then as a tree: the
// order of color_cuda's band kernel (one thread per lane).
template <PixelType T, int C>
double band_sum(const ColorImage& im, int band, Rows<T, C>& rows) {
  double lane[kColorLanes] = {};
  const int first_contrast = px::contrast_position(im);
  const int w = im.width, y0 = band * im.band_rows, y1 = std::min(im.height, y0 + im.band_rows);
  for (int y = y0; y < y1; ++y) {
    rows.load(im, y);
    rows.ops(im, 0, first_contrast, 0.f);
    const float* term = rows.terms(w);
    for (int x0 = 0; x0 < w; x0 += kColorLanes) {
      const int n = std::min(kColorLanes, w - x0);
      for (int t = 0; t < n; ++t) lane[t] += (double)term[x0 + t];
    }
  }
  for (int s = kColorLanes / 2; s > 0; s >>= 1)
    for (int i = 0; i < s; ++i) lane[i] += lane[i + s];
  return lane[0];
}

template <PixelType T, int C>
void run_color(const std::vector<ColorImage>& images, std::size_t threads) {
  int max_w = 0;
  for (const auto& im : images) max_w = std::max(max_w, im.width);
  // 1. The contrast sums, per (image, band).
  std::vector<std::pair<std::size_t, int>> band_items;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    for (int b = 0; b < images[i].bands; ++b) band_items.emplace_back(i, b);
    total += images[i].bands;
  }
  std::vector<double> sums((std::size_t)total);
  parallel_for(band_items.size(), threads, [&](std::size_t, WorkQueue& q) {
    Rows<T, C> rows(max_w);
    std::size_t k;
    while (q.claim(&k)) {
      const auto [i, b] = band_items[k];
      const ColorImage& im = images[i];
      sums[(std::size_t)(im.sum_offset + b)] = band_sum<T, C>(im, b, rows);
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
    Rows<T, C> rows(max_w);
    std::size_t k;
    while (q.claim(&k)) {
      const auto& it = items[k];
      const ColorImage& im = images[(std::size_t)it[0]];
      for (int y = (int)it[1]; y < (int)it[2]; ++y) {
        rows.load(im, y);
        rows.ops(im, 0, kMaxColorOps, means[(std::size_t)it[0]]);
        rows.store(im, y);
      }
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
