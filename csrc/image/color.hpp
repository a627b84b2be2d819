// The colour transforms' pixel arithmetic, once, for the CUDA kernels
// (color_cuda.cu) and the CPU twin (color_cpu.cpp): brightness, contrast,
// saturation and hue as torchvision.transforms.v2.functional computes them.
//
// torchvision works in float32 (or in the image's float dtype) with one
// rounding per torch op, then casts back: uint8 results are truncated
// (.to(torch.uint8) after a clamp), float16/bfloat16 ones rounded. Each helper
// below is one of those ops, in torch's order:
// - blend(x, y, r) = clamp(x * r + y * (1 - r)): x.mul(r) is one op, then
//   .add_(y, alpha=1 - r), which torch's vectorised CPU kernel computes as a
//   fused multiply-add (emulated by mul_add, exact for these magnitudes);
// - grayscale = r * 0.2989 + g * 0.587 + b * 0.114, the same op sequence,
//   floored for integer images;
// - hue goes through HSV exactly as _rgb_to_hsv / _hsv_to_rgb do.
// The scalars are taken as torch takes them: a mul's scalar as float32, an
// add's alpha as the image dtype. Every product and sum goes through the
// never-fused helpers of resample.hpp, so host and device agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "image/resample.hpp"

namespace gdsio::image {

enum class ColorOp : std::int8_t { kNone = 0, kBrightness = 1, kContrast = 2, kSaturation = 3, kHue = 4 };
constexpr int kMaxColorOps = 4;

// One image of a colour batch: the ops run in `ops` order (kNone skipped).
// factor[k] is the op's factor as float, one_minus[k] = (float)(1.0 - factor)
// computed in double on the host (torch's alpha=(1.0 - ratio)).
struct ColorImage {
  std::uintptr_t src = 0;           // channel 0, top-left pixel
  std::uintptr_t dst = 0;           // a contiguous (C, H, W) output of the same dtype
  std::int64_t channel_stride = 0;  // elements of src
  std::int64_t row_stride = 0;
  std::int32_t height = 0;
  std::int32_t width = 0;
  // The contrast mean's partial sums (set by plan_color): bands of band_rows
  // rows, one double each, from sum_offset in the workspace.
  std::int32_t band_rows = 0;
  std::int32_t bands = 0;
  std::int64_t sum_offset = 0;
  ColorOp ops[kMaxColorOps] = {ColorOp::kNone, ColorOp::kNone, ColorOp::kNone, ColorOp::kNone};
  float factor[kMaxColorOps] = {0, 0, 0, 0};
  float one_minus[kMaxColorOps] = {0, 0, 0, 0};
};

// The contrast mean is summed in double over lanes: in each band of rows,
// lane t adds the pixels x = t, t + kColorLanes, ... of every row in order,
// then the lanes are added pairwise (a tree), then the bands in order. The
// CUDA kernel runs a lane per thread; the CPU twin the same sums in the same
// order, so the mean is the same bits on both.
constexpr int kColorLanes = 256;
constexpr std::int64_t kColorBandPixels = 1 << 15;  // about this many pixels per band

namespace px {

GDSIO_HD inline float fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// a * b + c rounded once, as an FMA: the product of two floats is exact in
// double, and for pixel magnitudes the sum is too, so one rounding remains.
GDSIO_HD inline float mul_add(float a, float b, float c) {
  return (float)dadd(dmul((double)a, (double)b), (double)c);
}

GDSIO_HD inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
GDSIO_HD inline float maxf(float a, float b) { return a > b ? a : b; }
GDSIO_HD inline float minf(float a, float b) { return a < b ? a : b; }

// The rounding of one torch op's result: uint8 images compute in float32.
GDSIO_HD inline float op_round(PixelType t, float v) { return t == PixelType::kU8 ? v : round_to(t, v); }

// A value stored in the image dtype: uint8 truncates (v is clamped to [0, 255]).
GDSIO_HD inline float to_image(PixelType t, float v) {
  return t == PixelType::kU8 ? (float)(int)v : round_to(t, v);
}

GDSIO_HD inline float bound_of(PixelType t) { return t == PixelType::kU8 ? 255.f : 1.f; }

// _blend: x.mul(r).add_(y, alpha=1 - r).clamp_(0, bound), then the cast.
GDSIO_HD inline float blend(PixelType t, float x, float y, float r, float one_minus_r) {
  float o = op_round(t, fmul(x, r));
  o = op_round(t, mul_add(y, op_round(t, one_minus_r), o));
  return to_image(t, clampf(o, 0.f, bound_of(t)));
}

// _rgb_to_grayscale_image(preserve_dtype=False), floored for uint8 images.
GDSIO_HD inline float gray(PixelType t, float r, float g, float b) {
  float l = op_round(t, fmul(r, 0.2989f));
  l = op_round(t, mul_add(g, op_round(t, 0.587f), l));
  l = op_round(t, mul_add(b, op_round(t, 0.114f), l));
  return t == PixelType::kU8 ? floorf(l) : l;
}

// What the contrast mean averages at one pixel.
GDSIO_HD inline float contrast_term(PixelType t, int channels, const float* v) {
  return channels == 3 ? gray(t, v[0], v[1], v[2]) : v[0];
}

// torch.mean of the grayscale: sum then divide, each rounded to the dtype.
GDSIO_HD inline float mean_of(PixelType t, double sum, std::int64_t count) {
  return op_round(t, fdiv(op_round(t, (float)sum), (float)count));
}

GDSIO_HD inline void brightness(PixelType t, int channels, float* v, float f) {
  for (int c = 0; c < channels; ++c) v[c] = to_image(t, clampf(op_round(t, fmul(v[c], f)), 0.f, bound_of(t)));
}

GDSIO_HD inline void saturation(PixelType t, int channels, float* v, float f, float one_minus_f) {
  if (channels != 3) return;  // torchvision: a gray image is left as it is (as PIL does)
  const float g = gray(t, v[0], v[1], v[2]);
  for (int c = 0; c < 3; ++c) v[c] = blend(t, v[c], g, f, one_minus_f);
}

GDSIO_HD inline void contrast(PixelType t, int channels, float* v, float mean, float f, float one_minus_f) {
  for (int c = 0; c < channels; ++c) v[c] = blend(t, v[c], mean, f, one_minus_f);
}

// adjust_hue_image: to float32 in [0, 1], _rgb_to_hsv, h = (h + f) mod 1,
// _hsv_to_rgb, back to the dtype (uint8: * (255 + 1 - 1e-3), truncated).
GDSIO_HD inline void hue(PixelType t, int channels, float* v, float f) {
  if (channels != 3) return;
  float rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = t == PixelType::kU8 ? u8_to_unit((int)v[c]) : v[c];
  const float r = rgb[0], g = rgb[1], b = rgb[2];
  const float maxc = maxf(maxf(r, g), b), minc = minf(minf(r, g), b);
  const bool eqc = maxc == minc;
  const float range = fsub(maxc, minc);
  const float s = fdiv(range, eqc ? 1.f : maxc);
  const float div = eqc ? 1.f : range;
  const float rc = fdiv(fsub(maxc, r), div), gc = fdiv(fsub(maxc, g), div), bc = fdiv(fsub(maxc, b), div);
  // Exactly one of torchvision's three masked terms is selected (the others are 0).
  float h;
  if (maxc == r) h = fsub(bc, gc);
  else if (maxc == g) h = fsub(fadd(rc, 2.f), bc);
  else h = fsub(fadd(gc, 4.f), rc);
  h = fmodf(fadd(fmul(h, (float)(1.0 / 6.0)), 1.f), 1.f);
  // h.add_(hue_factor).remainder_(1.0): torch's remainder is fmod, then + 1 for negatives.
  h = fmodf(fadd(h, f), 1.f);
  if (h < 0.f) h = fadd(h, 1.f);

  const float h6 = fmul(h, 6.f);
  const float fl = floorf(h6);
  const float fr = fsub(h6, fl);
  const int i = ((int)fl % 6 + 6) % 6;
  const float sxf = fmul(s, fr);
  const float one_minus_s = fsub(1.f, s);
  const float val = maxc;
  const float q = clampf(fmul(fsub(1.f, sxf), val), 0.f, 1.f);
  const float tt = clampf(fmul(fadd(sxf, one_minus_s), val), 0.f, 1.f);
  const float p = clampf(fmul(one_minus_s, val), 0.f, 1.f);
  float o[3];
  switch (i) {
    case 0: o[0] = val; o[1] = tt; o[2] = p; break;
    case 1: o[0] = q; o[1] = val; o[2] = p; break;
    case 2: o[0] = p; o[1] = val; o[2] = tt; break;
    case 3: o[0] = p; o[1] = q; o[2] = val; break;
    case 4: o[0] = tt; o[1] = p; o[2] = val; break;
    default: o[0] = val; o[1] = p; o[2] = q; break;
  }
  for (int c = 0; c < 3; ++c)
    v[c] = t == PixelType::kU8 ? (float)(int)fmul(o[c], (float)(255.0 + 1.0 - 1e-3)) : round_to(t, o[c]);
}

// Runs ops [first, last) of image `im` on one pixel's channels; `mean` is
// the contrast mean (unused when no contrast op is in the range).
GDSIO_HD inline void color_ops(const ColorImage& im, PixelType t, int channels, int first, int last, float* v,
                               float mean) {
  for (int k = first; k < last; ++k) {
    switch (im.ops[k]) {
      case ColorOp::kBrightness: brightness(t, channels, v, im.factor[k]); break;
      case ColorOp::kContrast: contrast(t, channels, v, mean, im.factor[k], im.one_minus[k]); break;
      case ColorOp::kSaturation: saturation(t, channels, v, im.factor[k], im.one_minus[k]); break;
      case ColorOp::kHue: hue(t, channels, v, im.factor[k]); break;
      default: break;
    }
  }
}

// The position of the contrast op, or -1.
GDSIO_HD inline int contrast_position(const ColorImage& im) {
  for (int k = 0; k < kMaxColorOps; ++k)
    if (im.ops[k] == ColorOp::kContrast) return k;
  return -1;
}

// Loads pixel (y, x) of `im` (all channels) as float.
GDSIO_HD inline void load_pixel(const ColorImage& im, PixelType t, int channels, std::int64_t y, std::int64_t x,
                                float* v) {
  const void* src = reinterpret_cast<const void*>(im.src);
  for (int c = 0; c < channels; ++c) v[c] = load_as_float(t, src, c * im.channel_stride + y * im.row_stride + x);
}

GDSIO_HD inline void store_pixel(const ColorImage& im, PixelType t, int channels, std::int64_t y, std::int64_t x,
                                 const float* v) {
  void* dst = reinterpret_cast<void*>(im.dst);
  const std::int64_t plane = (std::int64_t)im.height * im.width;
  for (int c = 0; c < channels; ++c) store_float(t, dst, c * plane + y * im.width + x, v[c]);
}

}  // namespace px
}  // namespace gdsio::image
