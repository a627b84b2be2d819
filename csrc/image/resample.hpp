// The pixel arithmetic of the transforms, once, for the CUDA kernels and the
// CPU twin alike: filter weights, windows, fixed-point rounding, and the
// per-pixel float conversions. Ported from Pillow's src/libImaging/Resample.c
// (precompute_coeffs, normalize_coeffs_8bpc, ImagingResample{Horizontal,
// Vertical}_8bpc), Pillow's ImagingScaleAffine (NEAREST), and OpenCV's
// imgproc resize.cpp (INTER_LINEAR and INTER_NEAREST for 8-bit images).
//
// Bit-exactness between host and device rests on two rules kept here:
// every double/float operation is a single correctly rounded IEEE operation
// (the device helpers use __dmul_rn & co. so nvcc cannot fuse them into an
// FMA, and host_rounded() keeps the host compiler from doing so), and
// nothing calls a transcendental function (no lanczos/hamming: sin()
// differs between glibc and libdevice).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifndef GDSIO_HD
#ifdef __CUDACC__
#define GDSIO_HD __host__ __device__
#else
#define GDSIO_HD
#endif
#endif

namespace gdsio::image {

enum class Filter : std::int32_t { kNearest = 0, kBox = 1, kBilinear = 2, kBicubic = 3 };

// Whose definition a resize follows: Pillow's Image.resize (antialiased,
// support widened when shrinking) or OpenCV's cv2.resize (no antialias).
enum class Reference : std::int32_t { kPillow = 0, kOpenCV = 1 };

// Element types of transform outputs (torch dtypes on the Python side).
enum class PixelType : std::int32_t { kU8 = 0, kF32 = 1, kF16 = 2, kBF16 = 3 };

// How the two passes round: Pillow clips to uint8 after each pass (22-bit
// weights); OpenCV keeps the horizontal sums as int (11-bit weights) and
// rounds once, the way its SIMD vertical pass does.
enum class Arith : std::int32_t { kPillow8 = 0, kOpenCV8 = 1 };

namespace px {

constexpr int kPillowPrecisionBits = 32 - 8 - 2;  // PRECISION_BITS in Resample.c
constexpr int kCvCoefBits = 11;                   // INTER_RESIZE_COEF_BITS
constexpr int kCvCoefScale = 1 << kCvCoefBits;    // INTER_RESIZE_COEF_SCALE

// ---- correctly rounded, never-fused arithmetic -------------------------------
// A host compiler targeting a CPU with FMA (-march=native, x86-64-v3 distro
// builds, aarch64) may fuse a product into the next addition; an empty asm
// that takes the product in a register makes it round first, as on the
// device and in Pillow's baseline x86-64 build.
template <typename T>
inline T host_rounded(T v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}

GDSIO_HD inline double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return host_rounded(a * b);
#endif
}
GDSIO_HD inline double dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
GDSIO_HD inline double dsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
GDSIO_HD inline double ddiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
GDSIO_HD inline float fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return host_rounded(a * b);
#endif
}
GDSIO_HD inline float fsub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GDSIO_HD inline float fdiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

GDSIO_HD inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---- Pillow's filters ----------------------------------------------------------
GDSIO_HD inline double pillow_support(Filter f) {
  switch (f) {
    case Filter::kBox: return 0.5;
    case Filter::kBilinear: return 1.0;
    case Filter::kBicubic: return 2.0;
    default: return 0.0;  // nearest has no window
  }
}

// box_filter, bilinear_filter, bicubic_filter (a = -0.5) of Resample.c, with
// C's left-to-right evaluation order kept.
GDSIO_HD inline double pillow_filter(Filter f, double x) {
  switch (f) {
    case Filter::kBox: return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
    case Filter::kBilinear:
      if (x < 0.0) x = -x;
      return x < 1.0 ? dsub(1.0, x) : 0.0;
    case Filter::kBicubic: {
      if (x < 0.0) x = -x;
      if (x < 1.0) return dadd(dmul(dmul(dsub(dmul(1.5, x), 2.5), x), x), 1.0);
      if (x < 2.0) return dmul(dsub(dmul(dadd(dmul(dsub(x, 5.0), x), 8.0), x), 4.0), -0.5);
      return 0.0;
    }
    default: return 0.0;
  }
}

// ---- one axis of a resize ------------------------------------------------------
// For each output index the coefficients are a window [start, start + count)
// of input indices (the vertical OpenCV window may reach outside the image:
// rows are clamped when read) and `ksize` int32 weights, of which `count`
// are used. Layout of one axis: bounds[2 * out] (start, count), then
// weights[out * ksize].
struct Axis {
  std::int32_t in;   // input length (of the crop)
  std::int32_t out;  // output length
  Filter filter;
  Reference ref;
  bool vertical;     // OpenCV clamps horizontal windows but not vertical ones
};

GDSIO_HD inline int axis_ksize(const Axis& a) {
  if (a.filter == Filter::kNearest) return 1;
  if (a.ref == Reference::kOpenCV) return 2;
  double scale = ddiv((double)a.in, (double)a.out);
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = dmul(pillow_support(a.filter), filterscale);
  return (int)ceil(support) * 2 + 1;
}

GDSIO_HD inline std::int64_t axis_ints(const Axis& a, int ksize) {
  return (std::int64_t)a.out * (2 + ksize);
}

// Pillow's NEAREST (ImagingScaleAffine): the source coordinate is accumulated,
// xo = scale/2, xo += scale per output index, so index i takes i additions.
// This is the recurrence itself; axis_coeffs() below runs it incrementally.
GDSIO_HD inline int pillow_nearest_index(double xo, int in) {
  int x = xo < 0.0 ? -1 : (int)xo;  // COORD()
  return clampi(x, 0, in - 1);      // never needed for in-range scales; guards the edges
}

// Pillow's precompute_coeffs for output index i, then normalize_coeffs_8bpc.
GDSIO_HD inline void pillow_window(const Axis& a, int i, int ksize, std::int32_t* bounds,
                                   std::int32_t* w) {
  double scale = ddiv((double)a.in, (double)a.out);
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = dmul(pillow_support(a.filter), filterscale);
  double center = dmul((double)i + 0.5, scale);
  double ss = ddiv(1.0, filterscale);
  int xmin = (int)dadd(dsub(center, support), 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = (int)dadd(dadd(center, support), 0.5);
  if (xmax > a.in) xmax = a.in;
  xmax -= xmin;
  // Weights are recomputed rather than stored as doubles: the same inputs
  // give the same bits, and no ksize-long scratch array is needed.
  double ww = 0.0;
  for (int x = 0; x < xmax; ++x)
    ww = dadd(ww, pillow_filter(a.filter, dmul(dadd(dsub((double)(x + xmin), center), 0.5), ss)));
  const double one = (double)(1 << kPillowPrecisionBits);
  for (int x = 0; x < xmax; ++x) {
    double k = pillow_filter(a.filter, dmul(dadd(dsub((double)(x + xmin), center), 0.5), ss));
    if (ww != 0.0) k = ddiv(k, ww);
    w[x] = k < 0 ? (std::int32_t)dadd(-0.5, dmul(k, one)) : (std::int32_t)dadd(0.5, dmul(k, one));
  }
  for (int x = xmax; x < ksize; ++x) w[x] = 0;
  bounds[0] = xmin;
  bounds[1] = xmax;
}

// OpenCV's INTER_LINEAR coefficients (resize.cpp, fixed point for 8-bit):
// fx = (float)((dx + 0.5) * scale - 0.5), two taps weighted
// saturate_cast<short>((1 - fx) * 2048) and saturate_cast<short>(fx * 2048).
// Horizontally fx is clamped at the borders; vertically it is not (rows are
// clamped instead), which makes a difference in the first and last rows.
GDSIO_HD inline void opencv_linear_window(const Axis& a, int i, std::int32_t* bounds, std::int32_t* w) {
  double scale = ddiv(1.0, ddiv((double)a.out, (double)a.in));
  float f = (float)dsub(dmul((double)i + 0.5, scale), 0.5);
  int s = (int)floorf(f);
  f = fsub(f, (float)s);
  int count = 2;
  if (!a.vertical) {
    if (s < 0) {
      f = 0.f;
      s = 0;
    }
    if (s + 1 >= a.in) {
      f = 0.f;
      s = a.in - 1;
      count = 1;
    }
  }
  w[0] = (std::int32_t)rintf(fmul(fsub(1.f, f), (float)kCvCoefScale));
  w[1] = count == 2 ? (std::int32_t)rintf(fmul(f, (float)kCvCoefScale)) : 0;
  bounds[0] = s;
  bounds[1] = count;
}

// OpenCV's INTER_NEAREST: sx = cvFloor(dx * (1 / inv_scale)), clamped.
GDSIO_HD inline int opencv_nearest_index(const Axis& a, int i) {
  double ifx = ddiv(1.0, ddiv((double)a.out, (double)a.in));
  int s = (int)floor(dmul((double)i, ifx));
  return clampi(s, 0, a.in - 1);
}

// The window of output index i (one GPU thread per index). For Pillow's
// NEAREST this runs the accumulation i times, which is what makes it equal
// to the sequential loop of axis_coeffs().
GDSIO_HD inline void axis_window(const Axis& a, int i, int ksize, std::int32_t* bounds, std::int32_t* w) {
  if (a.filter == Filter::kNearest) {
    int s;
    if (a.ref == Reference::kPillow) {
      double step = ddiv((double)a.in, (double)a.out);
      double xo = dmul(step, 0.5);
      for (int k = 0; k < i; ++k) xo = dadd(xo, step);
      s = pillow_nearest_index(xo, a.in);
    } else {
      s = opencv_nearest_index(a, i);
    }
    bounds[0] = s;
    bounds[1] = 1;
    // A single weight of one, in Pillow's fixed point: the passes copy exactly.
    w[0] = 1 << kPillowPrecisionBits;
    return;
  }
  if (a.ref == Reference::kOpenCV)
    opencv_linear_window(a, i, bounds, w);
  else
    pillow_window(a, i, ksize, bounds, w);
}

// Every window of an axis into `dst` (axis_ints() int32s): the host's way.
inline void axis_coeffs(const Axis& a, int ksize, std::int32_t* dst) {
  std::int32_t* bounds = dst;
  std::int32_t* w = dst + 2 * (std::int64_t)a.out;
  if (a.filter == Filter::kNearest && a.ref == Reference::kPillow) {
    double step = ddiv((double)a.in, (double)a.out);
    double xo = dmul(step, 0.5);
    for (int i = 0; i < a.out; ++i) {
      bounds[2 * i] = pillow_nearest_index(xo, a.in);
      bounds[2 * i + 1] = 1;
      w[i] = 1 << kPillowPrecisionBits;
      xo = dadd(xo, step);
    }
    return;
  }
  for (int i = 0; i < a.out; ++i) axis_window(a, i, ksize, bounds + 2 * i, w + (std::int64_t)i * ksize);
}

// ---- the two passes, per output value ---------------------------------------------
// Horizontal: sum of source bytes times weights, then (Pillow) clip8 to a
// byte or (OpenCV) kept as an int.
GDSIO_HD inline int h_init(Arith m) { return m == Arith::kPillow8 ? 1 << (kPillowPrecisionBits - 1) : 0; }
GDSIO_HD inline int h_finish(Arith m, int ss) {
  return m == Arith::kPillow8 ? clampi(ss >> kPillowPrecisionBits, 0, 255) : ss;
}
// Vertical: Pillow accumulates value * weight and clips; OpenCV's SIMD path
// (VResizeLinearVec_32s8u) takes ((S >> 4) * beta) >> 16 per row (a 16-bit
// multiply-high) and rounds the sum with (v + 2) >> 2.
GDSIO_HD inline int v_init(Arith m) { return m == Arith::kPillow8 ? 1 << (kPillowPrecisionBits - 1) : 0; }
GDSIO_HD inline int v_term(Arith m, int s, int w) {
  return m == Arith::kPillow8 ? s * w : ((s >> 4) * w) >> 16;
}
GDSIO_HD inline int v_finish(Arith m, int ss) {
  return m == Arith::kPillow8 ? clampi(ss >> kPillowPrecisionBits, 0, 255) : clampi((ss + 2) >> 2, 0, 255);
}

// ---- float conversions, exactly as torch rounds ---------------------------------
GDSIO_HD inline std::uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
GDSIO_HD inline float bits_float(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// float -> IEEE binary16, round to nearest even (subnormals, inf, NaN kept).
GDSIO_HD inline std::uint16_t float_to_half(float f) {
  std::uint32_t x = float_bits(f);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (std::uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (std::uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    if (ax < 0x33000000u) return (std::uint16_t)sign;  // below half the smallest subnormal
    std::uint32_t e = ax >> 23;
    std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    // The value is m * 2^(e - 150); in units of 2^-24 (the smallest
    // subnormal) it is m >> (126 - e), rounded to nearest even.
    std::uint32_t shift = 126u - e;
    std::uint32_t q = m >> shift;
    std::uint32_t rem = m & ((1u << shift) - 1u);
    std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (std::uint16_t)(sign | q);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits.
  std::uint32_t r = ax + 0xc8000000u;  // exponent - 112, in place
  r += 0xfffu + ((r >> 13) & 1u);
  return (std::uint16_t)(sign | (r >> 13));
}

GDSIO_HD inline float half_to_float(std::uint16_t h) {
  std::uint32_t sign = (std::uint32_t)(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    // Subnormal: m * 2^-24, exact in float.
    float v = (float)m * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// float -> bfloat16, round to nearest even (c10::BFloat16's rule).
GDSIO_HD inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // torch's canonical NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (std::uint16_t)(x >> 16);
}
GDSIO_HD inline float bf16_to_float(std::uint16_t b) { return bits_float((std::uint32_t)b << 16); }

// Rounds a float to the precision of `t` and back (torch rounds every op's
// result to the tensor dtype).
GDSIO_HD inline float round_to(PixelType t, float v) {
  switch (t) {
    case PixelType::kF16: return half_to_float(float_to_half(v));
    case PixelType::kBF16: return bf16_to_float(float_to_bf16(v));
    default: return v;
  }
}

GDSIO_HD inline float load_as_float(PixelType t, const void* p, std::int64_t i) {
  switch (t) {
    case PixelType::kU8: return (float)static_cast<const std::uint8_t*>(p)[i];
    case PixelType::kF32: return static_cast<const float*>(p)[i];
    case PixelType::kF16: return half_to_float(static_cast<const std::uint16_t*>(p)[i]);
    default: return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
  }
}

// Stores a float as `t` (uint8: v is already an integer in [0, 255]).
GDSIO_HD inline void store_float(PixelType t, void* p, std::int64_t i, float v) {
  switch (t) {
    case PixelType::kU8: static_cast<std::uint8_t*>(p)[i] = (std::uint8_t)v; break;
    case PixelType::kF32: static_cast<float*>(p)[i] = v; break;
    case PixelType::kF16: static_cast<std::uint16_t*>(p)[i] = float_to_half(v); break;
    default: static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v); break;
  }
}

// torchvision's to_dtype(uint8 -> float, scale=True): image.to(dtype).mul_(1/255),
// the scalar taken as a float (torch's opmath for float, half and bfloat16).
constexpr float kInv255 = (float)(1.0 / 255.0);
GDSIO_HD inline float u8_to_unit(int u) { return fmul((float)u, kInv255); }

// The epilogue of a resize: the resampled byte u becomes the output value.
struct Epilogue {
  PixelType out;
  bool scale;      // u / 255 (to_dtype(..., scale=True))
  bool normalize;  // then (v - mean[c]) / std[c], in float32
  float mean[4];
  float std[4];
};

GDSIO_HD inline void store_resampled(const Epilogue& e, void* out, std::int64_t i, int c, int u) {
  if (e.out == PixelType::kU8) {
    static_cast<std::uint8_t*>(out)[i] = (std::uint8_t)u;
    return;
  }
  float v = e.scale ? u8_to_unit(u) : (float)u;
  // The fused op is defined as normalize in float32, then one cast: the
  // composition to_dtype(float32) -> normalize -> .to(dtype).
  if (e.normalize) v = fdiv(fsub(v, e.mean[c]), e.std[c]);
  store_float(e.out, out, i, v);
}

}  // namespace px
}  // namespace gdsio::image
