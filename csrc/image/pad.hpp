// Padding (torchvision.transforms.v2.functional.pad), once for the CUDA
// kernel (pad_cuda.cu) and the CPU twin (pad_cpu.cpp): which source row or
// column an output row or column copies, or none (the fill).
//
// torchvision's rules: a negative padding crops that side first; the modes
// then pad the cropped image: constant (the fill), edge (the border value
// repeated), reflect (mirrored without the border: padding < side) and
// symmetric (mirrored with it: padding <= side).
#pragma once

#include <cstdint>

#ifndef GDSIO_HD
#ifdef __CUDACC__
#define GDSIO_HD __host__ __device__
#else
#define GDSIO_HD
#endif
#endif

namespace gdsio::image {

enum class PadMode : std::int32_t { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

constexpr int kMaxPadFill = 16;  // per-channel fill values (more channels take one scalar fill)

// One axis: `in` source pixels, `before` / `after` padding (negative: crop).
struct PadAxis {
  std::int64_t in = 0;
  std::int64_t before = 0;
  std::int64_t after = 0;

  GDSIO_HD std::int64_t cropped_before() const { return before < 0 ? -before : 0; }
  GDSIO_HD std::int64_t kept() const { return in - cropped_before() - (after < 0 ? -after : 0); }
  GDSIO_HD std::int64_t out() const { return (before > 0 ? before : 0) + kept() + (after > 0 ? after : 0); }
};

// The source index output index o copies along axis a, or -1 for the fill.
GDSIO_HD inline std::int64_t pad_source(const PadAxis& a, PadMode m, std::int64_t o) {
  const std::int64_t n = a.kept();
  std::int64_t i = o - (a.before > 0 ? a.before : 0);
  if (i < 0 || i >= n) {
    switch (m) {
      case PadMode::kConstant: return -1;
      case PadMode::kEdge: i = i < 0 ? 0 : n - 1; break;
      case PadMode::kReflect: i = i < 0 ? -i : 2 * (n - 1) - i; break;
      default: i = i < 0 ? -i - 1 : 2 * n - 1 - i; break;
    }
  }
  return a.cropped_before() + i;
}

// A contiguous (planes, in_h, in_w) input padded into a contiguous
// (planes, out_h, out_w) output; plane p is channel p % channels.
struct PadSpec {
  std::int64_t planes = 0;
  std::int32_t channels = 1;
  std::int32_t elem_size = 1;   // 1, 2, 4 or 8 bytes
  PadAxis rows, cols;
  PadMode mode = PadMode::kConstant;
  std::int32_t fill_count = 1;  // 1 (one value for all channels) or `channels` (<= kMaxPadFill)
  std::uint64_t fill[kMaxPadFill] = {};  // the fill's bits in the element type, low bytes first

  GDSIO_HD std::uint64_t fill_of(std::int64_t plane) const {
    return fill[fill_count == 1 ? 0 : (int)(plane % channels)];
  }
};

}  // namespace gdsio::image
