// AVX2 and AVX-512 kernels of the CPU resize (see resample_simd.hpp for the
// arithmetic). Functions carry target attributes and run only when the CPU
// says it has the level's instructions; nothing here is inline code shared
// with other translation units.
#include "image/resample_simd.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GDSIO_X86_SIMD 1
#include <immintrin.h>
#define GDSIO_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#endif

namespace gdsio::image::simd {

namespace {

Level cpu_best() {
#ifdef GDSIO_X86_SIMD
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the registers' state.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("avx512vbmi"))
    return Level::kAvx512;
  if (__builtin_cpu_supports("avx2")) return Level::kAvx2;
#endif
  return Level::kScalar;
}

Level detect() {
  Level b = cpu_best();
  const char* env = std::getenv("GDSIO_CPU_SIMD");
  if (env != nullptr) {
    Level cap = b;
    if (std::strcmp(env, "scalar") == 0) cap = Level::kScalar;
    if (std::strcmp(env, "avx2") == 0) cap = Level::kAvx2;
    if ((int)cap < (int)b) b = cap;
  }
  return b;
}

Level best() {
  static const Level b = detect();
  return b;
}

std::atomic<int> g_level{-1};

inline std::int16_t lo15(std::int32_t w) { return (std::int16_t)(w & 0x7fff); }
inline std::int16_t hi15(std::int32_t w) { return (std::int16_t)((w - (w & 0x7fff)) >> 15); }

// w = d[0] * 2^16 + d[1] * 2^8 + d[2], each digit in [-128, 127] (the
// AVX-512 kernels' pieces); false when |w| is too large for three digits.
inline bool digits3(std::int32_t w, std::int8_t d[3]) {
  const std::int32_t d0 = ((w + 128) & 255) - 128;
  const std::int32_t r = (w - d0) / 256;  // exact
  const std::int32_t d1 = ((r + 128) & 255) - 128;
  const std::int32_t d2 = (r - d1) / 256;  // exact
  if (d2 < -128 || d2 > 127) return false;
  d[0] = (std::int8_t)d2, d[1] = (std::int8_t)d1, d[2] = (std::int8_t)d0;
  return true;
}

constexpr int kShift = 22;               // PRECISION_BITS of Pillow's Resample.c
constexpr std::int32_t kInit = 1 << 21;  // h_init / v_init of Pillow's 8-bit passes
// kInit as the AVX-512 kernels add it: to the top digit's sum, which is then
// shifted left twice by 8 bits.
constexpr std::int32_t kInitTop = kInit >> 16;

// AVX-512 taps per vector: 16 pixels of at most 4 bytes fill one 64-byte load;
// windows of up to kMaxVectors512 such vectors (1024 taps) take the AVX-512
// kernels, longer ones the AVX2 kernels.
constexpr int kTaps512 = 16;
constexpr int kMaxVectors512 = 64;

}  // namespace

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  return l < 0 ? best() : (Level)l;
}

void set_level(Level l) {
  const Level b = best();
  g_level.store((int)((int)l > (int)b ? b : l), std::memory_order_relaxed);
}

const char* level_name(Level l) {
  return l == Level::kAvx512 ? "avx512" : l == Level::kAvx2 ? "avx2" : "scalar";
}

// ---- weights --------------------------------------------------------------------
// AVX2, interleaved: per output index and pair of taps (t, t + 1), 64 bytes:
// the weights' hi then lo halves as int16 pairs (tap t, tap t + 1) for each of
// four channel slots, the same in both 128-bit lanes (lane 0 takes one row,
// lane 1 the next). AVX2, planar: groups of 16 taps, 64 bytes (hi, lo) per
// group and output index.
//
// AVX-512: a 64-byte header (int32: the layout, the tap groups) and then
// - kBlocks (interleaved and planar): blocks of P = 16 / C output indices
//   (5 pixels of 3 channels, 4 of 4, or 16 planar values), one int32 lane per
//   (index, channel), lane 15 unused for C = 3. Per block, a 64-byte byte index into the source
//   bytes from the block's first window start (lane l = i * slots + c, tap t:
//   (start_i - start_0 + t) * ps + c), and per group of 4 taps, 3 x 64 bytes
//   (one per digit): byte 4 l + t is that digit of tap 4 g + t of index i.
//   Every group of taps of a block is then one (or two) 64-byte loads and one
//   byte permutation: the block's windows must lie within 64 (kBlocks64) or
//   128 bytes (kBlocks128), the source readable kOverRead bytes past them.
// - kVectors (interleaved, where a block's windows spread wider): per output
//   index, vectors of 16 taps, 3 x 64 bytes per vector; byte 4 (4 g + c) + t
//   of a digit's 64 is that digit of tap 16 v + 4 g + t, every channel slot c.
namespace {
enum Layout512 : std::int32_t { kBlocks64 = 1, kBlocks128 = 2, kVectors = 3 };

std::size_t blocks_bytes(int out, int k, int slots) {
  const int per_block = 16 / slots;
  return 64 + (std::size_t)((out + per_block - 1) / per_block) * (64 + (std::size_t)((k + 3) / 4) * 192);
}

// Fills the kBlocks layout; 0 when a weight does not fit three digits or a
// block's windows spread over more than 128 bytes.
std::int32_t fill_blocks(const std::int32_t* bounds, const std::int32_t* w, int out, int k, int ps, int slots,
                         std::int8_t* dst) {
  const int per_block = 16 / slots, groups = (k + 3) / 4;
  const std::size_t bstride = 64 + (std::size_t)groups * 192;
  int widest = 0;
  for (int b = 0; b * per_block < out; ++b) {
    std::int8_t* blk = dst + 64 + b * bstride;
    std::memset(blk, 0, bstride);  // lanes past per_block * slots: index 0, weights 0
    const int x0 = b * per_block;
    for (int i = 0; i < per_block; ++i) {
      const int x = x0 + i < out ? x0 + i : out - 1;  // past the end: a real window, weights zero
      const int d = bounds[2 * x] - bounds[2 * x0];
      for (int c = 0; c < slots; ++c) {
        for (int t = 0; t < 4; ++t) {
          const int byte = (d + t) * ps + c;
          if (byte > 127) return 0;
          if (byte + 1 > widest) widest = byte + 1;
          blk[4 * (i * slots + c) + t] = (std::int8_t)byte;
        }
      }
      for (int g = 0; g < groups; ++g) {
        // Digit e of taps 4g..4g+3 as the four bytes of one int32 lane.
        std::uint8_t lanes[3][4] = {};
        for (int t = 0; t < 4 && x0 + i < out; ++t) {
          const int tap = 4 * g + t;
          std::int8_t dg[3] = {0, 0, 0};
          if (tap < k && !digits3(w[(std::size_t)x * k + tap], dg)) return 0;
          for (int e = 0; e < 3; ++e) lanes[e][t] = (std::uint8_t)dg[e];
        }
        for (int e = 0; e < 3; ++e)
          for (int c = 0; c < slots; ++c) std::memcpy(blk + 64 + 192 * g + 64 * e + 4 * (i * slots + c), lanes[e], 4);
      }
    }
  }
  // A group's load of 64 or 128 bytes from its window's first pixel ends
  // within kOverRead bytes past the block's first window.
  static_assert(kOverRead >= 128, "the AVX-512 block kernels read 128 bytes from a group's first tap");
  return widest <= 64 ? kBlocks64 : kBlocks128;
}

void header(std::int8_t* dst, std::int32_t layout, int groups) {
  std::memset(dst, 0, 64);
  std::memcpy(dst, &layout, 4);
  std::memcpy(dst + 4, &groups, 4);
}
}  // namespace

std::size_t h_weights_bytes_interleaved(Level l, int out, int k) {
  if (l == Level::kAvx512) {
    const std::size_t vectors = 64 + (std::size_t)out * ((k + kTaps512 - 1) / kTaps512) * 192;
    const std::size_t blocks = blocks_bytes(out, k, 3) > blocks_bytes(out, k, 4) ? blocks_bytes(out, k, 3)
                                                                                 : blocks_bytes(out, k, 4);
    return vectors > blocks ? vectors : blocks;
  }
  return (std::size_t)out * ((k + 1) / 2) * 64;
}

bool h_weights_interleaved(Level l, const std::int32_t* bounds, const std::int32_t* w, int out, int k,
                           int channels, int pixel_stride, void* out_bytes) {
  if (l == Level::kAvx512) {
    auto* dst = static_cast<std::int8_t*>(out_bytes);
    const std::int32_t layout = fill_blocks(bounds, w, out, k, pixel_stride, channels, dst);
    if (layout != 0) {
      header(dst, layout, (k + 3) / 4);
      return true;
    }
    const int nv = (k + kTaps512 - 1) / kTaps512;
    if (nv > kMaxVectors512) return false;
    header(dst, kVectors, nv);
    for (int x = 0; x < out; ++x) {
      for (int v = 0; v < nv; ++v) {
        std::int8_t* block = dst + 64 + ((std::size_t)x * nv + v) * 192;
        for (int g = 0; g < 4; ++g) {
          for (int t = 0; t < 4; ++t) {
            const int tap = kTaps512 * v + 4 * g + t;
            std::int8_t d[3] = {0, 0, 0};
            if (tap < k && !digits3(w[(std::size_t)x * k + tap], d)) return false;
            for (int i = 0; i < 3; ++i)
              for (int c = 0; c < 4; ++c) block[64 * i + 4 * (4 * g + c) + t] = d[i];
          }
        }
      }
    }
    return true;
  }
  const int pairs = (k + 1) / 2;
  auto* dst = static_cast<std::int16_t*>(out_bytes);
  for (int x = 0; x < out; ++x) {
    for (int q = 0; q < pairs; ++q) {
      std::int16_t* hi = dst + ((std::size_t)x * pairs + q) * 32;
      std::int16_t* lo = hi + 16;
      for (int t = 0; t < 2; ++t) {
        const int tap = 2 * q + t;
        const std::int32_t v = tap < k ? w[(std::size_t)x * k + tap] : 0;
        for (int lane = 0; lane < 2; ++lane) {
          for (int c = 0; c < 4; ++c) {
            hi[lane * 8 + 2 * c + t] = hi15(v);
            lo[lane * 8 + 2 * c + t] = lo15(v);
          }
        }
      }
    }
  }
  return true;
}

std::size_t h_weights_bytes_planar(Level l, int out, int k) {
  if (l == Level::kAvx512) return blocks_bytes(out, k, 1);
  return (std::size_t)out * ((k + 15) / 16) * 64;
}

bool h_weights_planar(Level l, const std::int32_t* bounds, const std::int32_t* w, int out, int k, void* out_bytes) {
  if (l == Level::kAvx512) {
    auto* dst = static_cast<std::int8_t*>(out_bytes);
    const std::int32_t layout = fill_blocks(bounds, w, out, k, 1, 1, dst);
    if (layout == 0) return false;  // windows spread wider: the AVX2 kernel
    header(dst, layout, (k + 3) / 4);
    return true;
  }
  const int groups = (k + 15) / 16;
  auto* dst = static_cast<std::int16_t*>(out_bytes);
  for (int x = 0; x < out; ++x) {
    for (int g = 0; g < groups; ++g) {
      std::int16_t* hi = dst + ((std::size_t)x * groups + g) * 32;
      std::int16_t* lo = hi + 16;
      for (int t = 0; t < 16; ++t) {
        const int tap = 16 * g + t;
        const std::int32_t v = tap < k ? w[(std::size_t)x * k + tap] : 0;
        hi[t] = hi15(v);
        lo[t] = lo15(v);
      }
    }
  }
  return true;
}

#ifdef GDSIO_X86_SIMD
namespace {

__attribute__((target("avx2"))) inline __m256i rebuild(__m256i hi, __m256i lo) {
  return _mm256_add_epi32(_mm256_slli_epi32(hi, 15), lo);
}

// One output pixel's sums for two rows that share the windows, row p in
// lane 0 and row q in lane 1: per group of four taps one 16-byte load of each
// row and two byte shuffles into (tap t, tap t + 1) int16 pairs per channel
// slot, then each pair's hi and lo multiply-adds; Q groups of four (Q < 0:
// `quads` at run time) and, when R, a last pair. Every lane ends as one
// channel's sum (the init added in each): no reduction across lanes.
template <int Q, bool R>
__attribute__((target("avx2"))) inline __m256i h_interleaved_px(const std::uint8_t* p, const std::uint8_t* q,
                                                                const __m256i* w, std::ptrdiff_t step, int quads,
                                                                __m256i m01, __m256i m23, __m256i init) {
  __m256i ah = _mm256_setzero_si256(), al = init;
  const int n = Q >= 0 ? Q : quads;
  for (int g = 0; g < n; ++g, p += step, q += step, w += 4) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), 1);
    const __m256i a = _mm256_shuffle_epi8(v, m01), b = _mm256_shuffle_epi8(v, m23);
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(a, _mm256_loadu_si256(w)));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(a, _mm256_loadu_si256(w + 1)));
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(b, _mm256_loadu_si256(w + 2)));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(b, _mm256_loadu_si256(w + 3)));
  }
  if (R) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), 1);
    const __m256i a = _mm256_shuffle_epi8(v, m01);
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(a, _mm256_loadu_si256(w)));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(a, _mm256_loadu_si256(w + 1)));
  }
  return rebuild(ah, al);
}

// Four pixels' sums (lane 0: row 0's four channel slots, lane 1: row 1's) ->
// each row's C bytes a pixel, rounded and clipped as h_finish does (16 bytes
// stored a row: C = 3 writes four past the last pixel's, which the next
// pixels or the row's padding take).
__attribute__((target("avx2"))) inline void h_store4(__m256i s0, __m256i s1, __m256i s2, __m256i s3,
                                                     __m256i compact, bool compacting, std::uint8_t* dst0,
                                                     std::uint8_t* dst1) {
  const __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(s0, kShift), _mm256_srai_epi32(s1, kShift));
  const __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(s2, kShift), _mm256_srai_epi32(s3, kShift));
  __m256i b = _mm256_packus_epi16(p01, p23);  // per lane: pixels 0-3, four slots each
  if (compacting) b = _mm256_shuffle_epi8(b, compact);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst0), _mm256_castsi256_si128(b));
  if (dst1 != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst1), _mm256_extracti128_si256(b, 1));
}

template <int Q, bool R>
__attribute__((target("avx2"))) void h_interleaved_g(const std::uint8_t* row0, const std::uint8_t* row1,
                                                     int channels, int ps, int out, int quads,
                                                     const std::int32_t* bounds, const std::int16_t* weights,
                                                     __m256i m01, __m256i m23, std::uint8_t* dst0,
                                                     std::uint8_t* dst1) {
  const __m256i init = _mm256_set1_epi32(kInit);  // every lane is one channel's sum
  const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128, 0, 1, 2,
                                           4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128);
  const bool compacting = channels == 3;
  const std::ptrdiff_t step = 4 * (std::ptrdiff_t)ps;
  const std::size_t wstride = (std::size_t)(2 * quads + (R ? 1 : 0)) * 32;  // int16s per output index
  // One row: lane 1 reads row 0 again and is not stored.
  const std::uint8_t* other = row1 != nullptr ? row1 : row0;
#define px(x)                                                                                                     \
  h_interleaved_px<Q, R>(row0 + (std::ptrdiff_t)bounds[2 * (x)] * ps, other + (std::ptrdiff_t)bounds[2 * (x)] * ps, \
                         reinterpret_cast<const __m256i*>(weights + (std::size_t)(x) * wstride), step, quads, m01,  \
                         m23, init)
  int x = 0;
  for (; x + 4 <= out; x += 4)
    h_store4(px(x), px(x + 1), px(x + 2), px(x + 3), compact, compacting, dst0 + (std::size_t)x * channels,
             row1 != nullptr ? dst1 + (std::size_t)x * channels : nullptr);
  if (x < out) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i s0 = px(x), s1 = x + 1 < out ? px(x + 1) : z, s2 = x + 2 < out ? px(x + 2) : z;
    h_store4(s0, s1, s2, z, compact, compacting, dst0 + (std::size_t)x * channels,
             row1 != nullptr ? dst1 + (std::size_t)x * channels : nullptr);
  }
#undef px
}

__attribute__((target("avx2"))) void h_interleaved_avx2(const std::uint8_t* row0, const std::uint8_t* row1,
                                                        int channels, int ps, int out, int k,
                                                        const std::int32_t* bounds, const std::int16_t* weights,
                                                        std::uint8_t* dst0, std::uint8_t* dst1) {
  // Per 128-bit lane, int16 slot 2 c + t takes channel c of tap t (m01) or of
  // tap t + 2 (m23) of the 16 bytes loaded; slots of channels past C read zero.
  alignas(32) std::int8_t m[2][32];
  for (int h = 0; h < 2; ++h)
    for (int lane = 0; lane < 2; ++lane)
      for (int c = 0; c < 4; ++c)
        for (int t = 0; t < 2; ++t) {
          const int i = lane * 16 + 4 * c + 2 * t;
          m[h][i] = c < channels ? (std::int8_t)((2 * h + t) * ps + c) : (std::int8_t)-128;
          m[h][i + 1] = (std::int8_t)-128;
        }
  const __m256i m01 = _mm256_load_si256(reinterpret_cast<const __m256i*>(m[0]));
  const __m256i m23 = _mm256_load_si256(reinterpret_cast<const __m256i*>(m[1]));
  const int pairs = (k + 1) / 2, quads = pairs / 2;
#define GDSIO_H_CASE(Q, R) \
  return h_interleaved_g<Q, R>(row0, row1, channels, ps, out, quads, bounds, weights, m01, m23, dst0, dst1)
  if (pairs % 2 == 0) {
    switch (quads) {
      case 1: GDSIO_H_CASE(1, false);
      case 2: GDSIO_H_CASE(2, false);
      case 3: GDSIO_H_CASE(3, false);
      case 4: GDSIO_H_CASE(4, false);
      default: GDSIO_H_CASE(-1, false);
    }
  }
  switch (quads) {
    case 0: GDSIO_H_CASE(0, true);
    case 1: GDSIO_H_CASE(1, true);
    case 2: GDSIO_H_CASE(2, true);
    case 3: GDSIO_H_CASE(3, true);
    default: GDSIO_H_CASE(-1, true);
  }
#undef GDSIO_H_CASE
}

template <int G>
__attribute__((target("avx2"))) inline __m256i h_planar_one(const std::uint8_t* p, const __m256i* w, int groups) {
  __m256i ah = _mm256_setzero_si256(), al = _mm256_setzero_si256();
  const int n = G > 0 ? G : groups;
  for (int g = 0; g < n; ++g, p += 16, w += 2) {
    const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(v, _mm256_loadu_si256(w)));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(v, _mm256_loadu_si256(w + 1)));
  }
  return rebuild(ah, al);
}

template <int G>
__attribute__((target("avx2"))) void h_planar_g(const std::uint8_t* row, int out, int groups,
                                               const std::int32_t* bounds, const std::int16_t* weights,
                                               std::uint8_t* dst) {
  const __m256i init = _mm256_set1_epi32(kInit);
  const std::size_t wstride = (std::size_t)groups * 32;
  for (int x0 = 0; x0 < out; x0 += 8) {
    __m256i s[8];
    for (int i = 0; i < 8; ++i) {
      const int x = x0 + i;
      s[i] = x < out ? h_planar_one<G>(row + bounds[2 * x],
                                       reinterpret_cast<const __m256i*>(weights + (std::size_t)x * wstride), groups)
                     : _mm256_setzero_si256();
    }
    // Eight sums of eight lanes each: two levels of in-lane pairwise adds,
    // then the 128-bit halves.
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    __m256i t = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
    t = _mm256_srai_epi32(_mm256_add_epi32(t, init), kShift);
    const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    const __m128i p8 = _mm_packus_epi16(p16, p16);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + x0), p8);  // up to 7 bytes past `out`: padding
  }
}

__attribute__((target("avx2"))) void h_planar_avx2(const std::uint8_t* row, int out, int k,
                                                   const std::int32_t* bounds, const std::int16_t* weights,
                                                   std::uint8_t* dst) {
  const int groups = (k + 15) / 16;
  switch (groups) {
    case 1: return h_planar_g<1>(row, out, groups, bounds, weights, dst);
    case 2: return h_planar_g<2>(row, out, groups, bounds, weights, dst);
    case 3: return h_planar_g<3>(row, out, groups, bounds, weights, dst);
    default: return h_planar_g<0>(row, out, groups, bounds, weights, dst);
  }
}

// The vertical pass: each value's byte widened to an int32 lane and
// multiplied by the whole weight (vpmulld: Pillow's product itself, no
// split), V x 8 values a step.
template <int V>
__attribute__((target("avx2"))) inline void v_avx2_step(const std::uint8_t* const* rows, const std::int32_t* w, int n,
                                                        std::ptrdiff_t x, std::uint8_t* dst) {
  __m256i a[V];
  for (int i = 0; i < V; ++i) a[i] = _mm256_set1_epi32(kInit);
  for (int j = 0; j < n; ++j) {
    const std::uint8_t* r = rows[j] + x;
    const __m256i wj = _mm256_set1_epi32(w[j]);
    for (int i = 0; i < V; ++i) {
      const __m256i p = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 8 * i)));
      a[i] = _mm256_add_epi32(a[i], _mm256_mullo_epi32(p, wj));
    }
  }
  // packs and packus interleave the 128-bit lanes: the 4-value groups of 32
  // values come out as 0, 2, 4, 6 | 1, 3, 5, 7; one permutation orders them.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < V; i += 4) {
    const __m256i p01 = _mm256_packs_epi32(_mm256_srai_epi32(a[i], kShift), _mm256_srai_epi32(a[i + 1], kShift));
    const __m256i p23 = _mm256_packs_epi32(_mm256_srai_epi32(a[i + 2], kShift), _mm256_srai_epi32(a[i + 3], kShift));
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x + 8 * i), b);
  }
}

// 64 values a step, the last 32 or fewer as 32 (reads and writes stay within
// kOverRead / kOverWrite of `width`).
__attribute__((target("avx2"))) void v_avx2(const std::uint8_t* const* rows, const std::int32_t* w, int n, int width,
                                            std::uint8_t* dst) {
  int x = 0;
  for (; x + 32 < width; x += 64) v_avx2_step<8>(rows, w, n, x, dst);
  if (x < width) v_avx2_step<4>(rows, w, n, x, dst);
}

// Sixteen pixels (48 bytes) at a time: channel c of pixel i is byte 3i + c,
// in one of the three 16-byte blocks; one shuffle per block and channel.
__attribute__((target("avx2"))) void deinterleave3_avx2(const std::uint8_t* v, int n, bool flip, std::uint8_t* o0,
                                                        std::uint8_t* o1, std::uint8_t* o2) {
  alignas(16) std::int8_t m[3][3][16];  // [channel][block][output byte]
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < 16; ++i) {
        const int src = 3 * (flip ? 15 - i : i) + c;
        m[c][b][i] = src / 16 == b ? (std::int8_t)(src % 16) : (std::int8_t)-128;
      }
  __m128i mk[3][3];
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 3; ++b) mk[c][b] = _mm_load_si128(reinterpret_cast<const __m128i*>(m[c][b]));
  std::uint8_t* o[3] = {o0, o1, o2};
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 3 * x));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 3 * x + 16));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 3 * x + 32));
    for (int c = 0; c < 3; ++c) {
      const __m128i r = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, mk[c][0]), _mm_shuffle_epi8(b, mk[c][1])),
                                     _mm_shuffle_epi8(d, mk[c][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o[c] + (flip ? n - 16 - x : x)), r);
    }
  }
  for (; x < n; ++x)
    for (int c = 0; c < 3; ++c) o[c][flip ? n - 1 - x : x] = v[3 * x + c];
}


// Eight bytes to eight floats, the epilogue's operations one instruction each. "avx2" does not
// enable FMA, so the compiler cannot fuse the multiply into the subtraction.
__attribute__((target("avx2"))) inline __m256 u8_to_f32_8(__m128i b, bool scale, __m256 mul, bool normalize,
                                                        __m256 mean, __m256 sd) {
  __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  if (scale) v = _mm256_mul_ps(v, mul);
  if (normalize) v = _mm256_div_ps(_mm256_sub_ps(v, mean), sd);
  return v;
}

// Eight floats stored as `out` at dst (8 elements).
__attribute__((target("avx2"))) inline void store8_f32(__m256 v, void* dst) {
  _mm256_storeu_ps(static_cast<float*>(dst), v);
}
__attribute__((target("avx2,f16c"))) inline void store8_f16(__m256 v, void* dst) {
  _mm_storeu_si128(static_cast<__m128i*>(dst), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// bfloat16: the float's bits + 0x7fff + (bit 16), the top half (c10::BFloat16's rounding, NaN aside).
__attribute__((target("avx2"))) inline void store8_bf16(__m256 v, void* dst) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  _mm_storeu_si128(static_cast<__m128i*>(dst),
                   _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));  // each < 2^16
}

// F16C for the float16 store (called only where the CPU has it); the float32 and bfloat16 stores use
// none of its two conversions, which the compiler emits for half-precision types alone.
template <void (*Store)(__m256, void*), int Elem>
__attribute__((target("avx2,f16c"))) void u8_to_float_avx2(const std::uint8_t* src, int n, bool scale, float mul,
                                                           bool normalize, float mean, float sd, void* dst) {
  const __m256 k = _mm256_set1_ps(mul), m = _mm256_set1_ps(mean), s = _mm256_set1_ps(sd);
  auto* d = static_cast<std::uint8_t*>(dst);
  int x = 0;
  for (; x + 8 <= n; x += 8)
    Store(u8_to_f32_8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + x)), scale, k, normalize, m, s),
          d + (std::ptrdiff_t)x * Elem);
  if (x < n) {  // the last 1-7 values through the same instructions
    alignas(16) std::uint8_t b[16] = {};
    alignas(32) std::uint8_t f[8 * Elem];
    std::memcpy(b, src + x, (std::size_t)(n - x));
    Store(u8_to_f32_8(_mm_load_si128(reinterpret_cast<const __m128i*>(b)), scale, k, normalize, m, s), f);
    std::memcpy(d + (std::ptrdiff_t)x * Elem, f, (std::size_t)(n - x) * Elem);
  }
}


// ---- AVX-512 (VNNI) -------------------------------------------------------------
// GCC 12 warns of the "undefined" vectors inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Horner's way over the digits: acc = (((init + sum_d2) << 8) + sum_d1 << 8) + sum_d0.
// `x[v]`: the pixels of tap vector v; `w`: 3 vectors (d2, d1, d0) per tap vector.
template <int NV>
GDSIO_AVX512 inline __m512i dot3(const __m512i* x, const std::int8_t* w, int nv, __m512i init) {
  const int n = NV > 0 ? NV : nv;
  __m512i a = init;
  for (int v = 0; v < n; ++v) a = _mm512_dpbusd_epi32(a, x[v], _mm512_loadu_si512(w + 192 * v));
  a = _mm512_slli_epi32(a, 8);
  for (int v = 0; v < n; ++v) a = _mm512_dpbusd_epi32(a, x[v], _mm512_loadu_si512(w + 192 * v + 64));
  a = _mm512_slli_epi32(a, 8);
  for (int v = 0; v < n; ++v) a = _mm512_dpbusd_epi32(a, x[v], _mm512_loadu_si512(w + 192 * v + 128));
  return a;
}

// Interleaved rows: one output pixel's taps, 16 at a time, in one 64-byte
// load (masked to the bytes of the window: nothing is read past its last
// channel) and one byte permutation into lanes (g, c) of four taps 4g..4g+3
// of channel slot c. Slots c >= C hold bytes that no output takes.
template <int NV>
GDSIO_AVX512 inline void h512_interleaved_px(const std::uint8_t* p, const std::uint8_t* q, const std::int8_t* w,
                                             int nv, std::ptrdiff_t vstep, __m512i idx, const __mmask64* masks,
                                             __m512i init, __m512i* s, __m512i* t) {
  const int n = NV > 0 ? NV : nv;
  __m512i x[NV > 0 ? NV : kMaxVectors512];
  for (int v = 0; v < n; ++v) x[v] = _mm512_permutexvar_epi8(idx, _mm512_maskz_loadu_epi8(masks[v], p + v * vstep));
  *s = dot3<NV>(x, w, nv, init);
  if (q == nullptr) return;
  for (int v = 0; v < n; ++v) x[v] = _mm512_permutexvar_epi8(idx, _mm512_maskz_loadu_epi8(masks[v], q + v * vstep));
  *t = dot3<NV>(x, w, nv, init);
}

// Four pixels' sums (lanes (g, c): 4 tap groups x 4 channel slots) -> 16
// bytes: channel slot c of pixel i at byte 4 i + c, rounded and clipped as
// h_finish does.
GDSIO_AVX512 inline __m128i h512_finish4(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  const __m512i u = _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, 0x44), _mm512_shuffle_i32x4(s0, s1, 0xEE));
  const __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(s2, s3, 0x44), _mm512_shuffle_i32x4(s2, s3, 0xEE));
  const __m512i t = _mm512_add_epi32(_mm512_shuffle_i32x4(u, v, 0x88), _mm512_shuffle_i32x4(u, v, 0xDD));
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_srai_epi32(t, kShift), _mm512_setzero_si512()));
}

template <int NV>
GDSIO_AVX512 void h512_interleaved_g(const std::uint8_t* row0, const std::uint8_t* row1, int channels, int ps,
                                     int out, int k, const std::int32_t* bounds, const std::int8_t* weights,
                                     std::uint8_t* dst0, std::uint8_t* dst1) {
  const int nv = (k + kTaps512 - 1) / kTaps512;
  alignas(64) std::uint8_t ix[64];
  for (int g = 0; g < 4; ++g)
    for (int c = 0; c < 4; ++c)
      for (int t = 0; t < 4; ++t) ix[4 * (4 * g + c) + t] = (std::uint8_t)((4 * g + t) * ps + c);
  const __m512i idx = _mm512_load_si512(ix);
  // The bytes of each tap vector's taps: up to the last tap's last channel.
  __mmask64 masks[kMaxVectors512];
  for (int v = 0; v < nv; ++v) {
    const int taps = k - kTaps512 * v < kTaps512 ? k - kTaps512 * v : kTaps512;
    const int bytes = (taps - 1) * ps + channels;
    masks[v] = bytes >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << bytes) - 1);
  }
  const __m512i init = _mm512_maskz_set1_epi32(0x000f, kInitTop);  // once per channel: tap group 0
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128);
  const std::ptrdiff_t vstep = (std::ptrdiff_t)kTaps512 * ps;
  const std::size_t wstride = (std::size_t)nv * 192;
  for (int x = 0; x < out; x += 4) {
    __m512i s[4], t[4];
    const int n = out - x < 4 ? out - x : 4;
    for (int i = 0; i < 4; ++i) {
      s[i] = t[i] = _mm512_setzero_si512();
      if (i >= n) continue;
      const std::ptrdiff_t off = (std::ptrdiff_t)bounds[2 * (x + i)] * ps;
      h512_interleaved_px<NV>(row0 + off, row1 != nullptr ? row1 + off : nullptr,
                              weights + (std::size_t)(x + i) * wstride, nv, vstep, idx, masks, init, &s[i], &t[i]);
    }
    for (int r = 0; r < (row1 != nullptr ? 2 : 1); ++r) {
      __m128i b = r == 0 ? h512_finish4(s[0], s[1], s[2], s[3]) : h512_finish4(t[0], t[1], t[2], t[3]);
      std::uint8_t* d = (r == 0 ? dst0 : dst1) + (std::size_t)x * channels;
      if (channels == 3) b = _mm_shuffle_epi8(b, compact);
      _mm_mask_storeu_epi8(d, (__mmask16)((1u << (n * channels)) - 1), b);
    }
  }
}

// Blocks of P outputs (kBlocks layouts): per group of 4 taps, the bytes of
// every window of the block in one or two 64-byte loads from the group's
// first tap of the block's first window, one byte permutation into lanes
// (output, channel slot) of 4 taps, and 3 dot products (one per digit) into
// three accumulators. The lanes end as the outputs' sums: no reduction.
template <bool Two>
GDSIO_AVX512 inline __m512i h512_gather(const std::uint8_t* p, __m512i idx) {
  const __m512i lo = _mm512_loadu_si512(p);
  return Two ? _mm512_permutex2var_epi8(lo, idx, _mm512_loadu_si512(p + 64)) : _mm512_permutexvar_epi8(idx, lo);
}

// Pillow's sum from the three digits' sums: (a2 << 16) + (a1 << 8) + a0.
GDSIO_AVX512 inline __m512i h512_digits(__m512i a2, __m512i a1, __m512i a0) {
  return _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(_mm512_slli_epi32(a2, 8), a1), 8), a0);
}

// One block's sums for row p, and for row q into *t unless t is null (two
// rows share the windows: each weight vector is loaded once for both).
template <bool Two, int G>
GDSIO_AVX512 inline void h512_block(const std::uint8_t* p, const std::uint8_t* q, const std::int8_t* w, int groups,
                                    std::ptrdiff_t gstep, __m512i idx, __m512i init, __m512i* s, __m512i* t) {
  __m512i a2 = init, a1 = _mm512_setzero_si512(), a0 = _mm512_setzero_si512();
  __m512i b2 = init, b1 = _mm512_setzero_si512(), b0 = _mm512_setzero_si512();
  const int n = G > 0 ? G : groups;
  for (int g = 0; g < n; ++g, p += gstep, q += gstep, w += 192) {
    const __m512i w2 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64), w0 = _mm512_loadu_si512(w + 128);
    const __m512i x = h512_gather<Two>(p, idx);
    a2 = _mm512_dpbusd_epi32(a2, x, w2);
    a1 = _mm512_dpbusd_epi32(a1, x, w1);
    a0 = _mm512_dpbusd_epi32(a0, x, w0);
    if (t != nullptr) {
      const __m512i y = h512_gather<Two>(q, idx);
      b2 = _mm512_dpbusd_epi32(b2, y, w2);
      b1 = _mm512_dpbusd_epi32(b1, y, w1);
      b0 = _mm512_dpbusd_epi32(b0, y, w0);
    }
  }
  *s = h512_digits(a2, a1, a0);
  if (t != nullptr) *t = h512_digits(b2, b1, b0);
}

GDSIO_AVX512 inline __m128i h512_finish(__m512i s) {
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_srai_epi32(s, kShift), _mm512_setzero_si512()));
}

// `slots`: the channels of an interleaved pixel (3 or 4), or 1 (planar).
template <bool Two, int G>
GDSIO_AVX512 void h512_blocks_g(const std::uint8_t* row0, const std::uint8_t* row1, int slots, int ps, int out,
                                int groups, const std::int32_t* bounds, const std::int8_t* weights,
                                std::uint8_t* dst0, std::uint8_t* dst1) {
  const int per_block = 16 / slots;
  const std::size_t bstride = 64 + (std::size_t)groups * 192;
  const std::ptrdiff_t gstep = 4 * (std::ptrdiff_t)ps;
  const __m512i init = _mm512_set1_epi32(kInitTop);  // every lane is one output's sum
  const int out_bytes = slots;                        // the lanes are the output bytes, in order
  for (int b = 0, x = 0; x < out; ++b, x += per_block) {
    const std::int8_t* blk = weights + (std::size_t)b * bstride;
    const __m512i idx = _mm512_loadu_si512(blk);
    const std::ptrdiff_t off = (std::ptrdiff_t)bounds[2 * x] * ps;
    const int n = out - x < per_block ? out - x : per_block;
    const __mmask16 m = (__mmask16)((1u << (n * out_bytes)) - 1);
    __m512i s[2];
    h512_block<Two, G>(row0 + off, row1 != nullptr ? row1 + off : row0 + off, blk + 64, groups, gstep, idx, init,
                       &s[0], row1 != nullptr ? &s[1] : nullptr);
    for (int r = 0; r < (row1 != nullptr ? 2 : 1); ++r)
      _mm_mask_storeu_epi8((r == 0 ? dst0 : dst1) + (std::size_t)x * out_bytes, m, h512_finish(s[r]));
  }
}

GDSIO_AVX512 void h512_blocks(const std::uint8_t* row0, const std::uint8_t* row1, int slots, int ps, int out,
                              const std::int32_t* bounds, const std::int8_t* weights, std::uint8_t* dst0,
                              std::uint8_t* dst1) {
  std::int32_t layout, groups;
  std::memcpy(&layout, weights, 4);
  std::memcpy(&groups, weights + 4, 4);
  const std::int8_t* w = weights + 64;
#define GDSIO_B_CASE(T, G) return h512_blocks_g<T, G>(row0, row1, slots, ps, out, groups, bounds, w, dst0, dst1)
#define GDSIO_B_SWITCH(T)  \
  switch (groups) {        \
    case 1: GDSIO_B_CASE(T, 1); \
    case 2: GDSIO_B_CASE(T, 2); \
    case 3: GDSIO_B_CASE(T, 3); \
    case 4: GDSIO_B_CASE(T, 4); \
    case 5: GDSIO_B_CASE(T, 5); \
    case 6: GDSIO_B_CASE(T, 6); \
    default: GDSIO_B_CASE(T, 0); \
  }
  if (layout == kBlocks64) {
    GDSIO_B_SWITCH(false)
  }
  GDSIO_B_SWITCH(true)
#undef GDSIO_B_SWITCH
#undef GDSIO_B_CASE
}

GDSIO_AVX512 void h_interleaved_avx512(const std::uint8_t* row0, const std::uint8_t* row1, int channels, int ps,
                                       int out, int k, const std::int32_t* bounds, const void* weights,
                                       std::uint8_t* dst0, std::uint8_t* dst1) {
  const auto* w = static_cast<const std::int8_t*>(weights);
  std::int32_t layout;
  std::memcpy(&layout, w, 4);
  if (layout != kVectors) return h512_blocks(row0, row1, channels, ps, out, bounds, w, dst0, dst1);
  w += 64;
  switch ((k + kTaps512 - 1) / kTaps512) {
    case 1: return h512_interleaved_g<1>(row0, row1, channels, ps, out, k, bounds, w, dst0, dst1);
    case 2: return h512_interleaved_g<2>(row0, row1, channels, ps, out, k, bounds, w, dst0, dst1);
    case 3: return h512_interleaved_g<3>(row0, row1, channels, ps, out, k, bounds, w, dst0, dst1);
    default: return h512_interleaved_g<0>(row0, row1, channels, ps, out, k, bounds, w, dst0, dst1);
  }
}

GDSIO_AVX512 void h_planar_avx512(const std::uint8_t* row, int out, const std::int32_t* bounds, const void* weights,
                                  std::uint8_t* dst) {
  h512_blocks(row, nullptr, 1, 1, out, bounds, static_cast<const std::int8_t*>(weights), dst, nullptr);
}

// The vertical pass, 64 values at a time: four rows' bytes of one value in
// each int32 lane (two rounds of unpacks), three dot products per four rows.
GDSIO_AVX512 void v_avx512(const std::uint8_t* const* rows, const std::int32_t* w, int n, int width,
                           std::uint8_t* dst) {
  constexpr int kMaxQuads = 64;
  const int quads = (n + 3) / 4;
  alignas(64) std::int32_t wd[3][kMaxQuads];
  const std::uint8_t* r[4 * kMaxQuads];
  for (int q = 0; q < quads; ++q) {
    std::uint8_t d[3][4];
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * q + i;
      std::int8_t dj[3] = {0, 0, 0};
      if (j < n) digits3(w[j], dj);  // the caller checked that they fit
      for (int e = 0; e < 3; ++e) d[e][i] = (std::uint8_t)dj[e];
      r[j] = j < n ? rows[j] : rows[0];  // a real row, weight zero
    }
    for (int e = 0; e < 3; ++e) std::memcpy(&wd[e][q], d[e], 4);
  }
  const __m512i init = _mm512_set1_epi32(kInitTop);
  for (int x = 0; x < width; x += 64) {
    const __mmask64 m = width - x >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (width - x)) - 1);
    __m512i a[4][3];
    for (int i = 0; i < 4; ++i) a[i][0] = init, a[i][1] = a[i][2] = _mm512_setzero_si512();
    for (int q = 0; q < quads; ++q) {
      const __m512i r0 = _mm512_maskz_loadu_epi8(m, r[4 * q] + x);
      const __m512i r1 = _mm512_maskz_loadu_epi8(m, r[4 * q + 1] + x);
      const __m512i r2 = _mm512_maskz_loadu_epi8(m, r[4 * q + 2] + x);
      const __m512i r3 = _mm512_maskz_loadu_epi8(m, r[4 * q + 3] + x);
      const __m512i lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
      const __m512i lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
      const __m512i v[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                            _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
      const __m512i w2 = _mm512_set1_epi32(wd[0][q]), w1 = _mm512_set1_epi32(wd[1][q]),
                    w0 = _mm512_set1_epi32(wd[2][q]);
      for (int i = 0; i < 4; ++i) {
        a[i][0] = _mm512_dpbusd_epi32(a[i][0], v[i], w2);
        a[i][1] = _mm512_dpbusd_epi32(a[i][1], v[i], w1);
        a[i][2] = _mm512_dpbusd_epi32(a[i][2], v[i], w0);
      }
    }
    __m512i s[4];
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm512_srai_epi32(h512_digits(a[i][0], a[i][1], a[i][2]), kShift);
    }
    // Per 128-bit lane, s[i] holds values 16 L + 4 i .. + 3: the packs put them in order.
    const __m512i b = _mm512_packus_epi16(_mm512_packs_epi32(s[0], s[1]), _mm512_packs_epi32(s[2], s[3]));
    _mm512_mask_storeu_epi8(dst + x, m, b);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool v_fits_avx512(const std::int32_t* w, int n) {
  if (n > 4 * 64) return false;
  std::int8_t d[3];
  for (int j = 0; j < n; ++j)
    if (!digits3(w[j], d)) return false;
  return true;
}

}  // namespace
#endif  // GDSIO_X86_SIMD

void deinterleave3(Level l, const std::uint8_t* v, int n, bool flip, std::uint8_t* o0, std::uint8_t* o1,
                   std::uint8_t* o2) {
#ifdef GDSIO_X86_SIMD
  if (l != Level::kScalar) return deinterleave3_avx2(v, n, flip, o0, o1, o2);
#endif
  (void)l;
  std::uint8_t* o[3] = {o0, o1, o2};
  for (int x = 0; x < n; ++x)
    for (int c = 0; c < 3; ++c) o[c][flip ? n - 1 - x : x] = v[3 * x + c];
}

bool u8_to_float(Level l, FloatOut out, const std::uint8_t* src, int n, bool scale, float mul, bool normalize,
                 float mean, float std, void* dst) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kScalar) return false;
  switch (out) {
    case FloatOut::kF32:
      u8_to_float_avx2<store8_f32, 4>(src, n, scale, mul, normalize, mean, std, dst);
      return true;
    case FloatOut::kF16:
      if (!__builtin_cpu_supports("f16c")) return false;
      u8_to_float_avx2<store8_f16, 2>(src, n, scale, mul, normalize, mean, std, dst);
      return true;
    case FloatOut::kBF16:
      u8_to_float_avx2<store8_bf16, 2>(src, n, scale, mul, normalize, mean, std, dst);
      return true;
  }
#endif
  (void)l, (void)out, (void)src, (void)n, (void)scale, (void)mul, (void)normalize, (void)mean, (void)std, (void)dst;
  return false;
}

void h_rows_interleaved(Level l, const std::uint8_t* row0, const std::uint8_t* row1, int channels, int pixel_stride,
                        int out, int k, const std::int32_t* bounds, const void* weights, std::uint8_t* dst0,
                        std::uint8_t* dst1) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx512)
    return h_interleaved_avx512(row0, row1, channels, pixel_stride, out, k, bounds, weights, dst0, dst1);
  if (l == Level::kAvx2)
    return h_interleaved_avx2(row0, row1, channels, pixel_stride, out, k, bounds,
                              static_cast<const std::int16_t*>(weights), dst0, dst1);
#endif
  (void)l, (void)row0, (void)row1, (void)channels, (void)pixel_stride, (void)out, (void)k, (void)bounds,
      (void)weights, (void)dst0, (void)dst1;
  std::abort();  // callers run the scalar loops at Level::kScalar
}

void h_row_planar(Level l, const std::uint8_t* row, int out, int k, const std::int32_t* bounds,
                  const void* weights, std::uint8_t* dst) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx512) return h_planar_avx512(row, out, bounds, weights, dst);
  if (l == Level::kAvx2) return h_planar_avx2(row, out, k, bounds, static_cast<const std::int16_t*>(weights), dst);
#endif
  (void)l, (void)row, (void)out, (void)k, (void)bounds, (void)weights, (void)dst;
  std::abort();
}

void v_row(Level l, const std::uint8_t* const* rows, const std::int32_t* w, int n, int width, std::uint8_t* dst) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx512 && v_fits_avx512(w, n)) return v_avx512(rows, w, n, width, dst);
  if (l != Level::kScalar) return v_avx2(rows, w, n, width, dst);
#endif
  (void)l, (void)rows, (void)w, (void)n, (void)width, (void)dst;
  std::abort();
}

}  // namespace gdsio::image::simd
