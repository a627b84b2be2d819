// SIMD kernels of the CPU resize's two passes in Pillow's 8-bit arithmetic
// (resample.hpp: 22-bit weights, h_init/h_finish, v_init/v_finish), chosen at
// run time for the CPU at hand. They compute exactly what the scalar loops
// compute, Pillow's int32 sum rebuilt bit for bit (int32 wrap-around
// included, which Pillow's sums never reach) from pieces that fit the
// level's integer multiply-adds:
// - AVX2: in the horizontal pass every weight w is split as
//   w = hi * 2^15 + lo (lo in [0, 2^15), hi in [-2^8, 2^8]) for 16-bit
//   multiply-adds (vpmaddwd), and (sum_hi << 15) + sum_lo is the sum; the
//   vertical pass multiplies int32 lanes by the whole weight (vpmulld);
// - AVX-512 (F, BW, VL, VNNI, VBMI): w = d2 * 2^16 + d1 * 2^8 + d0 with
//   signed 8-bit digits, for the unsigned-byte x signed-byte dot products of
//   VNNI (vpdpbusd: four taps into each int32 lane, the pixels read as bytes,
//   no widening); the sum is ((sum_d2 << 8) + sum_d1 << 8) + sum_d0, taken
//   Horner's way in one accumulator.
// Beside them, the stores of a row's results: split into planes
// (deinterleave3) and, for a float output, the epilogue 8 values a vector
// (u8_to_float), used only where it gives back the scalar epilogue's table.
//
// Only raw pointers cross this header: the kernels live in a translation
// unit whose functions carry target attributes, and no inline function of a
// shared header may be compiled there with instructions other CPUs lack.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdsio::image::simd {

enum class Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest level this CPU runs (and this build has), unless lowered by
// set_level (tests compare the levels) or GDSIO_CPU_SIMD (scalar, avx2 or
// avx512: at most that level).
Level level();
void set_level(Level l);  // clamped to what the CPU supports
const char* level_name(Level l);

// Bytes a kernel may read past the last tap of a window, and write past the
// last output value of a row (callers pad their buffers by this much).
constexpr int kOverRead = 128;
constexpr int kOverWrite = 32;

// The horizontal weights of one axis re-laid for a level's kernel, from the
// padded windows (every window `k` taps inside the row, see pad_windows).
// The _bytes functions give the size of `dst`. The fill returns false when a
// weight does not fit the level's pieces (only AVX-512's digits can refuse,
// for a weight of magnitude 2^23 or more, which Pillow's never reach); the
// caller then takes a lower level.
// Interleaved pixels (C = 3 or 4 channels in a pixel of ps >= C bytes).
// `bounds`: (start, size) of each window, as the kernels take them; the
// AVX-512 layouts depend on how far apart neighbouring windows start.
std::size_t h_weights_bytes_interleaved(Level l, int out, int k);
bool h_weights_interleaved(Level l, const std::int32_t* bounds, const std::int32_t* w, int out, int k,
                           int channels, int pixel_stride, void* dst);
// One channel (contiguous taps).
std::size_t h_weights_bytes_planar(Level l, int out, int k);
bool h_weights_planar(Level l, const std::int32_t* bounds, const std::int32_t* w, int out, int k, void* dst);

// One row of the horizontal pass: dst[x * C + c] (interleaved) or dst[x]
// (planar) for x in [0, out). `starts[x]`: the first tap of window x, in
// pixels. The source may be read up to kOverRead bytes past the last tap.
// Interleaved rows come two at a time (they share the windows and weights);
// row1 may be null for one row. `weights`: filled for the same level.
void h_rows_interleaved(Level l, const std::uint8_t* row0, const std::uint8_t* row1, int channels, int pixel_stride,
                        int out, int k, const std::int32_t* bounds, const void* weights, std::uint8_t* dst0,
                        std::uint8_t* dst1);
void h_row_planar(Level l, const std::uint8_t* row, int out, int k, const std::int32_t* bounds,
                  const void* weights, std::uint8_t* dst);

// One row of the vertical pass over `width` bytes: dst[x] = v_finish(init +
// sum_j rows[j][x] * w[j]) for j < n. Rows may be read, and dst written, up
// to kOverRead / kOverWrite bytes past `width`.
void v_row(Level l, const std::uint8_t* const* rows, const std::int32_t* w, int n, int width, std::uint8_t* dst);

// What u8_to_float writes: float32, or float16 / bfloat16 rounded to
// nearest even from the float32 value.
enum class FloatOut : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// A row of n bytes as floats: v = u, times `mul` when `scale`, then
// (v - mean) / std when `normalize`, each operation rounded once to float32
// (no fused multiply-add), then stored as `out`; 8 values a vector (a tail
// through the same vector code). What px::store_resampled writes, bit for
// bit: epilogue_table compares all 256 values of each channel with its table
// before a resize uses this. False (nothing written): no vector kernel for
// `out` at `l` on this CPU (Level::kScalar; float16 without F16C).
bool u8_to_float(Level l, FloatOut out, const std::uint8_t* src, int n, bool scale, float mul, bool normalize,
                 float mean, float std, void* dst);

// Splits `n` interleaved 3-channel pixels into three planes, mirrored
// (o[n - 1 - x] = pixel x) when `flip`.
void deinterleave3(Level l, const std::uint8_t* v, int n, bool flip, std::uint8_t* o0, std::uint8_t* o1,
                   std::uint8_t* o2);

}  // namespace gdsio::image::simd
