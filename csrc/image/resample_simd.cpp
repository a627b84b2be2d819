// AVX2 kernels of the CPU resize (see resample_simd.hpp for the arithmetic).
// Functions carry target("avx2") attributes and run only when the CPU says it
// has AVX2; nothing here is inline code shared with other translation units.
#include "image/resample_simd.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GDSIO_X86_SIMD 1
#include <immintrin.h>
#endif

namespace gdsio::image::simd {

namespace {

Level detect() {
  const char* env = std::getenv("GDSIO_CPU_SIMD");
  if (env != nullptr && std::strcmp(env, "scalar") == 0) return Level::kScalar;
#ifdef GDSIO_X86_SIMD
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return Level::kAvx2;
#endif
  return Level::kScalar;
}

Level best() {
  static const Level b = detect();
  return b;
}

std::atomic<int> g_level{-1};

inline std::int16_t lo15(std::int32_t w) { return (std::int16_t)(w & 0x7fff); }
inline std::int16_t hi15(std::int32_t w) { return (std::int16_t)((w - (w & 0x7fff)) >> 15); }

constexpr int kShift = 22;               // PRECISION_BITS of Pillow's Resample.c
constexpr std::int32_t kInit = 1 << 21;  // h_init / v_init of Pillow's 8-bit passes

}  // namespace

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  return l < 0 ? best() : (Level)l;
}

void set_level(Level l) {
  const Level b = best();
  g_level.store((int)((int)l > (int)b ? b : l), std::memory_order_relaxed);
}

const char* level_name(Level l) { return l == Level::kAvx2 ? "avx2" : "scalar"; }

// ---- weights --------------------------------------------------------------------
std::size_t h_weights_bytes_interleaved(int out, int k) { return (std::size_t)out * ((k + 3) / 4) * 64; }

void h_weights_interleaved(const std::int32_t* w, int out, int k, std::int16_t* dst) {
  const int groups = (k + 3) / 4;
  for (int x = 0; x < out; ++x) {
    for (int g = 0; g < groups; ++g) {
      std::int16_t* hi = dst + ((std::size_t)x * groups + g) * 32;
      std::int16_t* lo = hi + 16;
      for (int lane = 0; lane < 2; ++lane) {
        for (int t = 0; t < 2; ++t) {
          const int tap = 4 * g + 2 * lane + t;
          const std::int32_t v = tap < k ? w[(std::size_t)x * k + tap] : 0;
          for (int c = 0; c < 4; ++c) {
            hi[lane * 8 + 2 * c + t] = hi15(v);
            lo[lane * 8 + 2 * c + t] = lo15(v);
          }
        }
      }
    }
  }
}

std::size_t h_weights_bytes_planar(int out, int k) { return (std::size_t)out * ((k + 15) / 16) * 64; }

void h_weights_planar(const std::int32_t* w, int out, int k, std::int16_t* dst) {
  const int groups = (k + 15) / 16;
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
}

#ifdef GDSIO_X86_SIMD
namespace {

__attribute__((target("avx2"))) inline __m256i rebuild(__m256i hi, __m256i lo) {
  return _mm256_add_epi32(_mm256_slli_epi32(hi, 15), lo);
}

// One output pixel's sums over `groups` groups of four taps (G > 0: that many,
// unrolled; G == 0: `groups` at run time), lanes (pixels 0-1 | 2-3) not yet added.
template <int G>
__attribute__((target("avx2"))) inline __m256i h_interleaved_one(const std::uint8_t* p, const __m256i* w,
                                                                 std::ptrdiff_t step, int groups, __m256i mask,
                                                                 __m256i init) {
  __m256i ah = _mm256_setzero_si256(), al = init;
  const int n = G > 0 ? G : groups;
  for (int g = 0; g < n; ++g, p += step, w += 2) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i pairs = _mm256_shuffle_epi8(v, mask);
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(pairs, _mm256_loadu_si256(w)));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(pairs, _mm256_loadu_si256(w + 1)));
  }
  return rebuild(ah, al);
}

// The same sums for two rows that share the windows: each weight is loaded once.
template <int G>
__attribute__((target("avx2"))) inline void h_interleaved_two(const std::uint8_t* p, const std::uint8_t* q,
                                                              const __m256i* w, std::ptrdiff_t step, int groups,
                                                              __m256i mask, __m256i init, __m256i* s, __m256i* t) {
  __m256i ah = _mm256_setzero_si256(), al = init, bh = _mm256_setzero_si256(), bl = init;
  const int n = G > 0 ? G : groups;
  for (int g = 0; g < n; ++g, p += step, q += step, w += 2) {
    const __m256i wh = _mm256_loadu_si256(w), wl = _mm256_loadu_si256(w + 1);
    const __m256i u = _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), mask);
    const __m256i v = _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), mask);
    ah = _mm256_add_epi32(ah, _mm256_madd_epi16(u, wh));
    al = _mm256_add_epi32(al, _mm256_madd_epi16(u, wl));
    bh = _mm256_add_epi32(bh, _mm256_madd_epi16(v, wh));
    bl = _mm256_add_epi32(bl, _mm256_madd_epi16(v, wl));
  }
  *s = rebuild(ah, al);
  *t = rebuild(bh, bl);
}

// Four pixels' lane sums -> their C bytes each at dst (16 bytes written).
__attribute__((target("avx2"))) inline void h_store4(__m256i s0, __m256i s1, __m256i s2, __m256i s3,
                                                     __m128i compact, std::uint8_t* dst) {
  __m256i t01 = _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x20), _mm256_permute2x128_si256(s0, s1, 0x31));
  __m256i t23 = _mm256_add_epi32(_mm256_permute2x128_si256(s2, s3, 0x20), _mm256_permute2x128_si256(s2, s3, 0x31));
  t01 = _mm256_srai_epi32(t01, kShift);                // [x0 | x1]
  t23 = _mm256_srai_epi32(t23, kShift);                // [x2 | x3]
  const __m256i p16 = _mm256_packs_epi32(t01, t23);   // [x0 x2 | x1 x3] as int16
  const __m256i p8 = _mm256_packus_epi16(p16, p16);   // [x0 x2 x0 x2 | x1 x3 x1 x3] as bytes
  const __m128i q = _mm_unpacklo_epi32(_mm256_castsi256_si128(p8), _mm256_extracti128_si256(p8, 1));
  // C = 3 writes four bytes past the last pixel's, which the next pixels
  // (or the row's padding) take.
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_shuffle_epi8(q, compact));
}

template <int G>
__attribute__((target("avx2"))) void h_interleaved_g(const std::uint8_t* row0, const std::uint8_t* row1,
                                                     int channels, int ps, int out, int groups,
                                                     const std::int32_t* bounds, const std::int16_t* weights,
                                                     __m256i mask, std::uint8_t* dst0, std::uint8_t* dst1) {
  // Pillow's rounding term, added once: in lane 0 of the low accumulator.
  const __m256i init = _mm256_setr_epi32(kInit, kInit, kInit, kInit, 0, 0, 0, 0);
  // The four bytes of each of four pixels, as C bytes each (C = 3: 12 bytes).
  const __m128i compact = channels == 3 ? _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128)
                                        : _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const std::ptrdiff_t step = 4 * (std::ptrdiff_t)ps;
  const std::size_t wstride = (std::size_t)groups * 32;
  const bool two = row1 != nullptr;
  for (int x = 0; x < out; x += 4) {
    // Four pixels at a time: add the lanes pairwise, then round and pack them together.
    __m256i s[4], t[4];
    for (int i = 0; i < 4; ++i) {
      if (x + i >= out) {
        s[i] = t[i] = _mm256_setzero_si256();
        continue;
      }
      const std::ptrdiff_t off = (std::ptrdiff_t)bounds[2 * (x + i)] * ps;
      const __m256i* w = reinterpret_cast<const __m256i*>(weights + (std::size_t)(x + i) * wstride);
      if (two)
        h_interleaved_two<G>(row0 + off, row1 + off, w, step, groups, mask, init, &s[i], &t[i]);
      else
        s[i] = h_interleaved_one<G>(row0 + off, w, step, groups, mask, init);
    }
    h_store4(s[0], s[1], s[2], s[3], compact, dst0 + (std::size_t)x * channels);
    if (two) h_store4(t[0], t[1], t[2], t[3], compact, dst1 + (std::size_t)x * channels);
  }
}

__attribute__((target("avx2"))) void h_interleaved_avx2(const std::uint8_t* row0, const std::uint8_t* row1,
                                                        int channels, int ps, int out, int k,
                                                        const std::int32_t* bounds, const std::int16_t* weights,
                                                        std::uint8_t* dst0, std::uint8_t* dst1) {
  // Lane 0 takes pixels 0 and 1 of a group of four, lane 1 pixels 2 and 3;
  // each 16-bit pair is (channel c of pixel t, channel c of pixel t + 1).
  alignas(32) std::int8_t m[32];
  for (int lane = 0; lane < 2; ++lane) {
    for (int c = 0; c < 4; ++c) {
      for (int t = 0; t < 2; ++t) {
        const int px = 2 * lane + t;
        const int i = lane * 16 + 4 * c + 2 * t;
        m[i] = c < channels ? (std::int8_t)(px * ps + c) : (std::int8_t)-128;
        m[i + 1] = (std::int8_t)-128;
      }
    }
  }
  const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(m));
  const int groups = (k + 3) / 4;
#define GDSIO_H_CASE(G) \
  return h_interleaved_g<G>(row0, row1, channels, ps, out, groups, bounds, weights, mask, dst0, dst1)
  switch (groups) {
    case 1: GDSIO_H_CASE(1);
    case 2: GDSIO_H_CASE(2);
    case 3: GDSIO_H_CASE(3);
    case 4: GDSIO_H_CASE(4);
    case 5: GDSIO_H_CASE(5);
    case 6: GDSIO_H_CASE(6);
    default: GDSIO_H_CASE(0);
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

__attribute__((target("avx2"))) void v_avx2(const std::uint8_t* const* rows, const std::int32_t* w, int n, int width,
                                            std::uint8_t* dst) {
  constexpr int kMaxPairs = 64;
  const __m256i init = _mm256_set1_epi32(kInit);
  const __m256i zero = _mm256_setzero_si256();
  // Taps in blocks of kMaxPairs pairs: the weights of a block as packed
  // (hi_j, hi_j+1) and (lo_j, lo_j+1) int16 pairs.
  alignas(32) std::int32_t wh[kMaxPairs], wl[kMaxPairs];
  for (int x = 0; x < width; x += 16) {
    __m256i h0 = zero, l0 = init, h1 = zero, l1 = init;
    for (int b = 0; b < n; b += 2 * kMaxPairs) {
      const int end = n < b + 2 * kMaxPairs ? n : b + 2 * kMaxPairs;
      const int pairs = (end - b + 1) / 2;
      if (x == 0 || n > 2 * kMaxPairs) {
        for (int q = 0; q < pairs; ++q) {
          const int j = b + 2 * q;
          const std::int32_t w0 = w[j], w1 = j + 1 < end ? w[j + 1] : 0;
          wh[q] = (std::int32_t)(((std::uint32_t)(std::uint16_t)hi15(w0)) | ((std::uint32_t)(std::uint16_t)hi15(w1) << 16));
          wl[q] = (std::int32_t)(((std::uint32_t)(std::uint16_t)lo15(w0)) | ((std::uint32_t)(std::uint16_t)lo15(w1) << 16));
        }
      }
      for (int q = 0; q < pairs; ++q) {
        const int j = b + 2 * q;
        const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + x)));
        const __m256i c = j + 1 < end
                              ? _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j + 1] + x)))
                              : zero;
        const __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c);
        const __m256i vh = _mm256_set1_epi32(wh[q]), vl = _mm256_set1_epi32(wl[q]);
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(lo, vh));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(lo, vl));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(hi, vh));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(hi, vl));
      }
    }
    // lo holds x 0-3 | 8-11, hi x 4-7 | 12-15: packs puts them back in order.
    const __m256i s0 = _mm256_srai_epi32(rebuild(h0, l0), kShift);
    const __m256i s1 = _mm256_srai_epi32(rebuild(h1, l1), kShift);
    const __m256i p16 = _mm256_packs_epi32(s0, s1);
    const __m256i p8 = _mm256_permute4x64_epi64(_mm256_packus_epi16(p16, p16), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x), _mm256_castsi256_si128(p8));
  }
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

}  // namespace
#endif  // GDSIO_X86_SIMD

void deinterleave3(Level l, const std::uint8_t* v, int n, bool flip, std::uint8_t* o0, std::uint8_t* o1,
                   std::uint8_t* o2) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx2) return deinterleave3_avx2(v, n, flip, o0, o1, o2);
#endif
  (void)l;
  std::uint8_t* o[3] = {o0, o1, o2};
  for (int x = 0; x < n; ++x)
    for (int c = 0; c < 3; ++c) o[c][flip ? n - 1 - x : x] = v[3 * x + c];
}

void h_rows_interleaved(Level l, const std::uint8_t* row0, const std::uint8_t* row1, int channels, int pixel_stride,
                        int out, int k, const std::int32_t* bounds, const std::int16_t* weights, std::uint8_t* dst0,
                        std::uint8_t* dst1) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx2)
    return h_interleaved_avx2(row0, row1, channels, pixel_stride, out, k, bounds, weights, dst0, dst1);
#endif
  (void)l, (void)row0, (void)row1, (void)channels, (void)pixel_stride, (void)out, (void)k, (void)bounds,
      (void)weights, (void)dst0, (void)dst1;
  std::abort();  // callers run the scalar loops at Level::kScalar
}

void h_row_planar(Level l, const std::uint8_t* row, int out, int k, const std::int32_t* bounds,
                  const std::int16_t* weights, std::uint8_t* dst) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx2) return h_planar_avx2(row, out, k, bounds, weights, dst);
#endif
  (void)l, (void)row, (void)out, (void)k, (void)bounds, (void)weights, (void)dst;
  std::abort();
}

void v_row(Level l, const std::uint8_t* const* rows, const std::int32_t* w, int n, int width, std::uint8_t* dst) {
#ifdef GDSIO_X86_SIMD
  if (l == Level::kAvx2) return v_avx2(rows, w, n, width, dst);
#endif
  (void)l, (void)rows, (void)w, (void)n, (void)width, (void)dst;
  std::abort();
}

}  // namespace gdsio::image::simd
