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
// The same functions serve the kernels (a pixel per thread, color_ops) and
// the CPU twin (over rows of planes, so that its loops vectorise).
// The scalars are taken as torch takes them: a mul's scalar as float32, an
// add's alpha as the image dtype. Every product and sum goes through the
// single-rounding helpers below, so host and device agree bit for bit.
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

// Single, correctly rounded float operations: the device's _rn intrinsics
// (nvcc would fuse a * b + c otherwise); plain operators on the host, whose
// build passes -ffp-contract=off (CMakeLists.txt), as luma_f32 in
// pixel_formats.hpp relies on. No asm barrier here, unlike resample.hpp's
// fmul: it would keep the CPU twin's row loops from vectorising.
GDSIO_HD inline float cmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GDSIO_HD inline float cadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GDSIO_HD inline float csub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GDSIO_HD inline float cdiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c rounded once, as an FMA: the product of two floats is exact in
// double (fused or not), and for pixel magnitudes the sum is too.
GDSIO_HD inline float mul_add(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return (float)__dadd_rn(__dmul_rn((double)a, (double)b), (double)c);
#else
  return (float)((double)a * (double)b + (double)c);
#endif
}

GDSIO_HD inline float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
GDSIO_HD inline float maxf(float a, float b) { return a > b ? a : b; }
GDSIO_HD inline float minf(float a, float b) { return a < b ? a : b; }

// Truncation toward zero of |v| < 2^31 (exact; floor for v >= 0), and
// fmod(v, 1) = v - trunc(v) (exact: the difference keeps v's low bits).
// Integer conversions rather than floorf/fmodf: no libm calls in the row loops.
GDSIO_HD inline float trunc_small(float v) { return (float)(int)v; }
GDSIO_HD inline float frac1(float v) { return csub(v, trunc_small(v)); }

// The rounding of one torch op's result: uint8 images compute in float32.
GDSIO_HD inline float op_round(PixelType t, float v) { return t == PixelType::kU8 ? v : round_to(t, v); }

// A value stored in the image dtype: uint8 truncates (v is clamped to [0, 255]).
GDSIO_HD inline float to_image(PixelType t, float v) { return t == PixelType::kU8 ? trunc_small(v) : round_to(t, v); }

GDSIO_HD inline float bound_of(PixelType t) { return t == PixelType::kU8 ? 255.f : 1.f; }

// adjust_brightness: image.mul(f).clamp_(0, bound), then the cast.
GDSIO_HD inline float brightness(PixelType t, float x, float f) {
  return to_image(t, clampf(op_round(t, cmul(x, f)), 0.f, bound_of(t)));
}

// _blend: x.mul(r).add_(y, alpha=1 - r).clamp_(0, bound), then the cast.
GDSIO_HD inline float blend(PixelType t, float x, float y, float r, float one_minus_r) {
  float o = op_round(t, cmul(x, r));
  o = op_round(t, mul_add(y, op_round(t, one_minus_r), o));
  return to_image(t, clampf(o, 0.f, bound_of(t)));
}

// _rgb_to_grayscale_image(preserve_dtype=False), floored for uint8 images.
GDSIO_HD inline float gray(PixelType t, float r, float g, float b) {
  float l = op_round(t, cmul(r, 0.2989f));
  l = op_round(t, mul_add(g, op_round(t, 0.587f), l));
  l = op_round(t, mul_add(b, op_round(t, 0.114f), l));
  return t == PixelType::kU8 ? trunc_small(l) : l;  // l >= 0: floor
}

// What the contrast mean averages at one pixel.
GDSIO_HD inline float contrast_term(PixelType t, int channels, const float* v) {
  return channels == 3 ? gray(t, v[0], v[1], v[2]) : v[0];
}

// torch.mean of the grayscale: sum then divide, each rounded to the dtype.
GDSIO_HD inline float mean_of(PixelType t, double sum, std::int64_t count) {
  return op_round(t, cdiv(op_round(t, (float)sum), (float)count));
}

// adjust_hue_image: to float32 in [0, 1], _rgb_to_hsv, h = (h + f) mod 1,
// _hsv_to_rgb, back to the dtype (uint8: * (255 + 1 - 1e-3), truncated).
GDSIO_HD inline void hue(PixelType t, float& r0, float& g0, float& b0, float f) {
  const bool u8 = t == PixelType::kU8;
  const float r = u8 ? cmul(r0, kInv255) : r0, g = u8 ? cmul(g0, kInv255) : g0, b = u8 ? cmul(b0, kInv255) : b0;
  const float maxc = maxf(maxf(r, g), b), minc = minf(minf(r, g), b);
  const bool eqc = maxc == minc;
  const float range = csub(maxc, minc);
  const float s = cdiv(range, eqc ? 1.f : maxc);
  const float div = eqc ? 1.f : range;
  const float rc = cdiv(csub(maxc, r), div), gc = cdiv(csub(maxc, g), div), bc = cdiv(csub(maxc, b), div);
  // Exactly one of torchvision's three masked terms is selected (the others are 0).
  const float hr = csub(bc, gc), hg = csub(cadd(rc, 2.f), bc), hb = csub(cadd(gc, 4.f), rc);
  float h = maxc == r ? hr : (maxc == g ? hg : hb);
  h = frac1(cadd(cmul(h, (float)(1.0 / 6.0)), 1.f));  // h.mul_(1/6).add_(1).fmod_(1)
  h = frac1(cadd(h, f));                               // .add_(hue_factor).remainder_(1.0):
  h = h < 0.f ? cadd(h, 1.f) : h;                      // fmod, then + 1 for negatives

  const float h6 = cmul(h, 6.f);
  const float fl = trunc_small(h6);  // h6 >= 0: floor
  const float fr = csub(h6, fl);
  int i = (int)fl;
  i = i >= 6 ? i - 6 : i;
  const float sxf = cmul(s, fr);
  const float one_minus_s = csub(1.f, s);
  const float v = maxc;
  const float q = clampf(cmul(csub(1.f, sxf), v), 0.f, 1.f);
  const float tt = clampf(cmul(cadd(sxf, one_minus_s), v), 0.f, 1.f);
  const float p = clampf(cmul(one_minus_s, v), 0.f, 1.f);
  // _hsv_to_rgb's table: i -> (r, g, b) = (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q),
  // as two-way selects without short-circuits: a six-way select would keep
  // the CPU twin's row loop from vectorising.
  const bool i0 = i == 0, i1 = i == 1, i2 = i == 2, i3 = i == 3, i4 = i == 4, i5 = i == 5;
  float ro = p, go = p, bo = p;
  ro = i1 ? q : ro;
  ro = i4 ? tt : ro;
  ro = (i0 | i5) ? v : ro;
  go = i0 ? tt : go;
  go = i3 ? q : go;
  go = (i1 | i2) ? v : go;
  bo = i2 ? tt : bo;
  bo = i5 ? q : bo;
  bo = (i3 | i4) ? v : bo;
  constexpr float kToU8 = (float)(255.0 + 1.0 - 1e-3);
  r0 = u8 ? trunc_small(cmul(ro, kToU8)) : round_to(t, ro);
  g0 = u8 ? trunc_small(cmul(go, kToU8)) : round_to(t, go);
  b0 = u8 ? trunc_small(cmul(bo, kToU8)) : round_to(t, bo);
}

// Runs ops [first, last) of image `im` on one pixel's channels (the CUDA
// kernels' form; the CPU twin runs the same functions over rows); `mean` is
// the contrast mean (unused when no contrast op is in the range).
GDSIO_HD inline void color_ops(const ColorImage& im, PixelType t, int channels, int first, int last, float* v,
                               float mean) {
  for (int k = first; k < last; ++k) {
    const float f = im.factor[k], g = im.one_minus[k];
    switch (im.ops[k]) {
      case ColorOp::kBrightness:
        for (int c = 0; c < channels; ++c) v[c] = brightness(t, v[c], f);
        break;
      case ColorOp::kContrast:
        for (int c = 0; c < channels; ++c) v[c] = blend(t, v[c], mean, f, g);
        break;
      case ColorOp::kSaturation:
        if (channels == 3) {  // a gray image is left as it is (torchvision, as PIL)
          const float l = gray(t, v[0], v[1], v[2]);
          for (int c = 0; c < 3; ++c) v[c] = blend(t, v[c], l, f, g);
        }
        break;
      case ColorOp::kHue:
        if (channels == 3) hue(t, v[0], v[1], v[2], f);
        break;
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
