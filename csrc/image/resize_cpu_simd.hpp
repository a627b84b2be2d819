// The CPU resize's SIMD schedule for Pillow's 8-bit arithmetic: a horizontal
// pass over interleaved pixels (or over one channel plane at a time) into
// uint8 rows, then a vertical pass over those rows, both through the kernels
// of resample_simd.hpp. Used by resize_cpu (transforms_cpu.cpp) when the CPU
// has a SIMD level and the windows are padded; the scalar loops there take
// everything else, with the same results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "image/resample_simd.hpp"
#include "image/transforms.hpp"

namespace gdsio::image::detail {

// The epilogue of a float or 16-bit output as a table of its 256 results per
// channel, each filled by px::store_resampled itself: one lookup per value
// instead of its arithmetic (a division among it), the same bits. An output
// whose table simd::u8_to_float gives back whole at `level` (all 256 values
// of every channel compared) is written by that kernel instead, 8 values a
// vector where the lookups go one at a time.
struct EpilogueTable {
  std::vector<std::uint8_t> bytes;  // [channel][256] values of `elem` bytes
  int elem = 0;                     // 0: no table (uint8 output)
  bool vector = false;              // simd::u8_to_float at `level` writes these bits
  simd::Level level = simd::Level::kScalar;
};
EpilogueTable epilogue_table(const px::Epilogue& e, int channels, simd::Level level);

// A worker's scratch bytes, grown as needed and never cleared: the passes
// write every byte they read back (a std::vector's resize zeroed the
// intermediate rows on every call, about 6% of a photo's resize).
class RawBuffer {
 public:
  std::uint8_t* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(new std::uint8_t[bytes]);  // default-initialized: not zeroed
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t size_ = 0;
};

// Per image: which kernel runs its horizontal pass, at which level, with its
// weights laid out for that level.
struct SimdPlan {
  enum Kind : std::uint8_t { kNone = 0, kInterleaved = 1, kPlanar = 2 } kind = kNone;
  simd::Level level = simd::Level::kScalar;
  std::vector<std::uint8_t> weights;
  // Every horizontal window is one tap of weight one at its own column (an
  // axis whose size does not change): the pass is a copy, which Pillow skips
  // too; the bytes are the same.
  bool h_identity = false;
  bool v_identity = false;  // the same for the vertical windows
};

// Chooses the kernel for an image whose horizontal windows are padded (all
// `taps` taps inside the row, their weights `taps` apart: pad_windows) and
// prepares its weights, at `level` or, when its weights do not fit that
// level's kernels, the next level down; kNone when no SIMD kernel takes this
// layout.
SimdPlan simd_prepare(simd::Level level, const ImageRef& im, const ImagePlan& p, const std::int32_t* co, int taps,
                      int channels);

// Output rows [y0, y1) of every channel of one image, as resize_rows does,
// at the plan's level; `table`: the call's, for non-uint8 outputs.
void simd_rows(const SimdPlan& sp, const EpilogueTable* table, const ImageRef& im, const ImagePlan& p,
               const std::int32_t* co, int taps, const ResizeSpec& spec, int y0, int y1, void* out_image,
               RawBuffer& scratch);

}  // namespace gdsio::image::detail
