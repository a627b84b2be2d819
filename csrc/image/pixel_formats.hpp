// Per-pixel arithmetic of the uncompressed decoders, written once and used by
// both the CUDA kernels (decode_cuda.cu) and the CPU twin (decode_cpu.cpp), so
// that the GPU output equals the CPU output bit for bit (see luma_f32 for the
// one float formula).
//
// Rules, all checked against Pillow (13.0 here) by tests/test_decode.py:
// - PNM samples are big-endian; 16-bit ones become host-order uint16.
// - PNM maxval rescaling (maxval not 255 / 65535): out = round(v * M / maxval)
//   with M = 255 when maxval <= 255 (uint8 output) and M = 65535 otherwise
//   (uint16 output), rounding half to even, and values above maxval clamped to
//   M. This is Pillow's PpmDecoder (`min(M, round(v / maxval * M))`, Python's
//   round is half-to-even) in exact integer arithmetic; it equals Pillow for
//   every maxval 1..255 and every sample, and for P5 16-bit. (Pillow turns a
//   16-bit P6 into 8-bit RGB; gdsio keeps uint16, as torchvision's read_image
//   keeps 16-bit PNG as uint16.)
// - RGB -> gray: Pillow's convert("L") in 16.16 fixed point,
//   L = (R*19595 + G*38470 + B*7471 + 0x8000) >> 16 (Convert.c, L24); the same
//   formula serves uint16 (it fits in 32 bits: 65535 * 65536 + 32768 < 2^32).
//   Float samples: L = R*0.299f + G*0.587f + B*0.114f, no fused multiply-add.
// - Gray -> RGB replicates; RGBA -> RGB drops alpha; LA -> gray keeps L.
// - uint8 / uint16 / float32 NPY and raw samples pass through unchanged
//   (byte order fixed), never rescaled.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "image/decode.hpp"

#if defined(__CUDACC__)
#define GDSIO_PIXEL_HD __host__ __device__ __forceinline__
#else
#define GDSIO_PIXEL_HD inline
#endif

namespace gdsio::image::px {

GDSIO_PIXEL_HD std::uint32_t load_u8(const std::uint8_t* p, std::int64_t i) { return p[i]; }

GDSIO_PIXEL_HD std::uint32_t load_u16le(const std::uint8_t* p, std::int64_t i) {
  return static_cast<std::uint32_t>(p[2 * i]) | (static_cast<std::uint32_t>(p[2 * i + 1]) << 8);
}

GDSIO_PIXEL_HD std::uint32_t load_u16be(const std::uint8_t* p, std::int64_t i) {
  return (static_cast<std::uint32_t>(p[2 * i]) << 8) | static_cast<std::uint32_t>(p[2 * i + 1]);
}

GDSIO_PIXEL_HD float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

GDSIO_PIXEL_HD float load_f32le(const std::uint8_t* p, std::int64_t i) {
  const std::uint8_t* b = p + 4 * i;
  return bits_to_float(static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
                       (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24));
}

GDSIO_PIXEL_HD float load_f32be(const std::uint8_t* p, std::int64_t i) {
  const std::uint8_t* b = p + 4 * i;
  return bits_to_float((static_cast<std::uint32_t>(b[0]) << 24) | (static_cast<std::uint32_t>(b[1]) << 16) |
                       (static_cast<std::uint32_t>(b[2]) << 8) | static_cast<std::uint32_t>(b[3]));
}

// round(v * out_max / maxval), half to even, v > maxval clamped to out_max.
// v, maxval, out_max <= 65535, so v * out_max < 2^32.
GDSIO_PIXEL_HD std::uint32_t scale_maxval(std::uint32_t v, std::uint32_t maxval, std::uint32_t out_max) {
  if (v >= maxval) return out_max;
  const std::uint32_t num = v * out_max;
  std::uint32_t q = num / maxval;
  const std::uint32_t r2 = 2u * (num - q * maxval);
  if (r2 > maxval || (r2 == maxval && (q & 1u))) ++q;
  return q;
}

// Pillow's L24 luma; exact for uint8 and uint16 samples.
GDSIO_PIXEL_HD std::uint32_t luma_int(std::uint32_t r, std::uint32_t g, std::uint32_t b) {
  return (r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16;
}

// Float luma evaluated left to right with every product and sum rounded: the
// GPU forbids FMA contraction explicitly; the host build passes
// -ffp-contract=off (CMakeLists.txt), so both agree bit for bit on any CPU.
GDSIO_PIXEL_HD float luma_f32(float r, float g, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fadd_rn(__fmul_rn(r, 0.299f), __fmul_rn(g, 0.587f)), __fmul_rn(b, 0.114f));
#else
  const float pr = r * 0.299f;
  const float pg = g * 0.587f;
  const float pb = b * 0.114f;
  return (pr + pg) + pb;
#endif
}

// One sample of job j at sample index i, by storage type; integer samples are
// rescaled from maxval when the job asks.
template <Sample S>
GDSIO_PIXEL_HD std::uint32_t load_int(const PixelJob& j, std::int64_t i) {
  std::uint32_t v;
  if constexpr (S == Sample::kU16LE) v = load_u16le(j.src, i);
  else if constexpr (S == Sample::kU16BE) v = load_u16be(j.src, i);
  else v = load_u8(j.src, i);
  if (j.maxval != 0) v = scale_maxval(v, j.maxval, S == Sample::kU8 ? 255u : 65535u);
  return v;
}

template <Sample S>
GDSIO_PIXEL_HD float load_float(const PixelJob& j, std::int64_t i) {
  if constexpr (S == Sample::kF32BE) return load_f32be(j.src, i);
  else return load_f32le(j.src, i);
}

// Each sample type has one output type (decode.hpp): uint8, uint16, float.
template <Sample S>
using out_t = std::conditional_t<S == Sample::kU8, std::uint8_t,
                                 std::conditional_t<S == Sample::kU16LE || S == Sample::kU16BE, std::uint16_t, float>>;

// Writes every output channel of pixel (y, x) of job j: out is a contiguous
// (dst_channels, height, width) array.
template <Sample S, Convert C>
GDSIO_PIXEL_HD void decode_pixel(const PixelJob& j, std::int64_t y, std::int64_t x) {
  using T = out_t<S>;
  constexpr bool kFloat = S == Sample::kF32LE || S == Sample::kF32BE;
  T* out = static_cast<T*>(j.dst);
  const std::int64_t base = y * j.stride_y + x * j.stride_x;
  const std::int64_t plane = j.height * j.width;
  const std::int64_t o = y * j.width + x;
  if constexpr (C == Convert::kLuma) {
    if constexpr (kFloat) {
      out[o] = luma_f32(load_float<S>(j, base), load_float<S>(j, base + j.stride_c),
                        load_float<S>(j, base + 2 * j.stride_c));
    } else {
      out[o] = static_cast<T>(luma_int(load_int<S>(j, base), load_int<S>(j, base + j.stride_c),
                                       load_int<S>(j, base + 2 * j.stride_c)));
    }
  } else if constexpr (C == Convert::kReplicate) {
    T v;
    if constexpr (kFloat) v = load_float<S>(j, base);
    else v = static_cast<T>(load_int<S>(j, base));
    for (std::int32_t c = 0; c < j.dst_channels; ++c) out[c * plane + o] = v;
  } else {
    for (std::int32_t c = 0; c < j.dst_channels; ++c) {
      if constexpr (kFloat) out[c * plane + o] = load_float<S>(j, base + c * j.stride_c);
      else out[c * plane + o] = static_cast<T>(load_int<S>(j, base + c * j.stride_c));
    }
  }
}

template <Sample S>
struct SampleTag {
  static constexpr Sample value = S;
};
template <Convert C>
struct ConvertTag {
  static constexpr Convert value = C;
};

// Calls f(SampleTag<S>{}, ConvertTag<C>{}) with the job's types as constants,
// so that the per-pixel code is specialised once per job rather than
// branching per sample (validate_pixel_job has checked the enums).
template <typename F>
GDSIO_PIXEL_HD void with_job_types(const PixelJob& j, F&& f) {
  auto by_convert = [&](auto s) {
    switch (j.convert) {
      case Convert::kLuma: f(s, ConvertTag<Convert::kLuma>{}); break;
      case Convert::kReplicate: f(s, ConvertTag<Convert::kReplicate>{}); break;
      default: f(s, ConvertTag<Convert::kCopy>{}); break;
    }
  };
  switch (j.sample) {
    case Sample::kU16LE: by_convert(SampleTag<Sample::kU16LE>{}); break;
    case Sample::kU16BE: by_convert(SampleTag<Sample::kU16BE>{}); break;
    case Sample::kF32LE: by_convert(SampleTag<Sample::kF32LE>{}); break;
    case Sample::kF32BE: by_convert(SampleTag<Sample::kF32BE>{}); break;
    default: by_convert(SampleTag<Sample::kU8>{}); break;
  }
}

}  // namespace gdsio::image::px
