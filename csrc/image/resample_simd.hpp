// SIMD kernels of the CPU resize's two passes in Pillow's 8-bit arithmetic
// (resample.hpp: 22-bit weights, h_init/h_finish, v_init/v_finish), chosen at
// run time for the CPU at hand. They compute exactly what the scalar loops
// compute: every weight w is split as w = hi * 2^15 + lo (lo in [0, 2^15),
// hi in [-2^8, 2^8]) so that pixel * weight sums run through 16-bit
// multiply-adds, and (sum_hi << 15) + sum_lo rebuilds Pillow's int32 sum
// bit for bit (int32 wrap-around included, which Pillow's sums never reach).
//
// Only raw pointers cross this header: the kernels live in a translation
// unit whose functions carry target attributes, and no inline function of a
// shared header may be compiled there with instructions other CPUs lack.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdsio::image::simd {

enum class Level : int { kScalar = 0, kAvx2 = 1 };

// The widest level this CPU runs (and this build has), unless lowered by
// set_level (tests compare the levels) or GDSIO_CPU_SIMD=scalar.
Level level();
void set_level(Level l);  // clamped to what the CPU supports
const char* level_name(Level l);

// Bytes a kernel may read past the last tap of a window, and write past the
// last output value of a row (callers pad their buffers by this much).
constexpr int kOverRead = 32;
constexpr int kOverWrite = 32;

// The horizontal weights of one axis re-laid for a kernel, from the padded
// windows (every window `k` taps inside the row, see pad_windows).
// Interleaved pixels (C = 3 or 4 channels in a pixel of ps >= C bytes):
// groups of 4 taps, 64 bytes per group and output index.
std::size_t h_weights_bytes_interleaved(int out, int k);
void h_weights_interleaved(const std::int32_t* w, int out, int k, std::int16_t* dst);
// One channel (contiguous taps): groups of 16 taps, 64 bytes per group.
std::size_t h_weights_bytes_planar(int out, int k);
void h_weights_planar(const std::int32_t* w, int out, int k, std::int16_t* dst);

// One row of the horizontal pass: dst[x * C + c] (interleaved) or dst[x]
// (planar) for x in [0, out). `starts[x]`: the first tap of window x, in
// pixels. The source may be read up to kOverRead bytes past the last tap.
// Interleaved rows come two at a time (they share the windows and weights);
// row1 may be null for one row.
void h_rows_interleaved(Level l, const std::uint8_t* row0, const std::uint8_t* row1, int channels, int pixel_stride,
                        int out, int k, const std::int32_t* bounds, const std::int16_t* weights, std::uint8_t* dst0,
                        std::uint8_t* dst1);
void h_row_planar(Level l, const std::uint8_t* row, int out, int k, const std::int32_t* bounds,
                  const std::int16_t* weights, std::uint8_t* dst);

// One row of the vertical pass over `width` bytes: dst[x] = v_finish(init +
// sum_j rows[j][x] * w[j]) for j < n. Rows may be read, and dst written, up
// to kOverRead / kOverWrite bytes past `width`.
void v_row(Level l, const std::uint8_t* const* rows, const std::int32_t* w, int n, int width, std::uint8_t* dst);

// Splits `n` interleaved 3-channel pixels into three planes, mirrored
// (o[n - 1 - x] = pixel x) when `flip`.
void deinterleave3(Level l, const std::uint8_t* v, int n, bool flip, std::uint8_t* o0, std::uint8_t* o1,
                   std::uint8_t* o2);

}  // namespace gdsio::image::simd
