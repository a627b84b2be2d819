#include "image/resize_cpu_simd.hpp"

#include <algorithm>
#include <cstring>

namespace gdsio::image::detail {

using px::clampi;

namespace {

std::int64_t round_up(std::int64_t v, std::int64_t a) { return (v + a - 1) / a * a; }

// The epilogue of one output row held as uint8 values `v` (interleaved: value
// x * C + c; planar: one channel `c0`) into the (C, out_h, out_w) image.
template <typename T>
void store_row_table(const EpilogueTable& t, int out_w, int C, int c0, std::int64_t plane, bool flip,
                     const std::uint8_t* v, int y, void* out_image) {
  for (int c = 0; c < C; ++c) {
    const int ch = c0 + c;
    const T* __restrict lut = reinterpret_cast<const T*>(t.bytes.data()) + 256 * ch;
    T* __restrict o = static_cast<T*>(out_image) + (std::int64_t)ch * plane + (std::int64_t)y * out_w;
    const std::uint8_t* __restrict vc = v + c;
    if (!flip) {
      for (int x = 0; x < out_w; ++x) o[x] = lut[vc[x * C]];
    } else {
      for (int x = 0; x < out_w; ++x) o[out_w - 1 - x] = lut[vc[x * C]];
    }
  }
}

// The kernel's name for a float output type.
simd::FloatOut float_out(PixelType t) {
  return t == PixelType::kF32   ? simd::FloatOut::kF32
         : t == PixelType::kF16 ? simd::FloatOut::kF16
                                : simd::FloatOut::kBF16;
}

// The row through simd::u8_to_float (the table's `vector`): C = 1 (a plane)
// or 3 (interleaved, split into planes first), in pieces of kPiece pixels; a
// flipped row's piece [x, x + m) lands at out_w - x - m.
void store_row_vector(const EpilogueTable& t, const px::Epilogue& e, int out_w, int C, int c0, std::int64_t plane,
                      bool flip, const std::uint8_t* v, int y, void* out_image) {
  constexpr int kPiece = 512;
  alignas(32) std::uint8_t b[3][kPiece];
  auto* row = static_cast<std::uint8_t*>(out_image) + ((std::int64_t)c0 * plane + (std::int64_t)y * out_w) * t.elem;
  for (int x = 0; x < out_w; x += kPiece) {
    const int m = std::min(kPiece, out_w - x);
    const int at = flip ? out_w - x - m : x;
    if (C == 3) {
      simd::deinterleave3(t.level, v + 3 * (std::int64_t)x, m, flip, b[0], b[1], b[2]);
    } else if (flip) {
      for (int i = 0; i < m; ++i) b[0][m - 1 - i] = v[x + i];
    }
    for (int c = 0; c < C; ++c) {
      const std::uint8_t* src = C == 3 || flip ? b[c] : v + x;
      simd::u8_to_float(t.level, float_out(e.out), src, m, e.scale, px::kInv255, e.normalize, e.mean[c0 + c],
                        e.std[c0 + c], row + ((std::int64_t)c * plane + at) * t.elem);
    }
  }
}

void store_row(simd::Level level, const ResizeSpec& spec, const EpilogueTable* table, bool flip, bool interleaved,
               int c0, const std::uint8_t* v, int y, void* out_image) {
  const int out_w = spec.out_w, C = interleaved ? spec.channels : 1;
  const std::int64_t plane = (std::int64_t)spec.out_h * out_w;
  const px::Epilogue& e = spec.epilogue;
  if (e.out == PixelType::kU8) {
    auto* o = static_cast<std::uint8_t*>(out_image) + (std::int64_t)c0 * plane + (std::int64_t)y * out_w;
    if (!interleaved) {
      if (!flip) {
        std::memcpy(o, v, (std::size_t)out_w);
      } else {
        for (int x = 0; x < out_w; ++x) o[out_w - 1 - x] = v[x];
      }
      return;
    }
    if (C == 3) return simd::deinterleave3(level, v, out_w, flip, o, o + plane, o + 2 * plane);
    for (int c = 0; c < C; ++c) {
      std::uint8_t* __restrict oc = o + c * plane;
      const std::uint8_t* __restrict vc = v + c;
      if (!flip) {
        for (int x = 0; x < out_w; ++x) oc[x] = vc[x * C];
      } else {
        for (int x = 0; x < out_w; ++x) oc[out_w - 1 - x] = vc[x * C];
      }
    }
    return;
  }
  if (table != nullptr && table->vector && (!interleaved || C == 3))
    return store_row_vector(*table, e, out_w, C, c0, plane, flip, v, y, out_image);
  if (table != nullptr && table->elem == 4)
    return store_row_table<std::uint32_t>(*table, out_w, C, c0, plane, flip, v, y, out_image);
  if (table != nullptr && table->elem == 2)
    return store_row_table<std::uint16_t>(*table, out_w, C, c0, plane, flip, v, y, out_image);
  for (int c = 0; c < C; ++c) {
    const int ch = c0 + c;
    const std::int64_t base = (std::int64_t)ch * plane + (std::int64_t)y * out_w;
    for (int x = 0; x < out_w; ++x)
      px::store_resampled(e, out_image, base + (flip ? out_w - 1 - x : x), ch, v[x * C + c]);
  }
}

// Every window of the axis (bounds, then weights: axis_coeffs' layout) is one
// tap of weight one at its own index.
bool identity(const px::Axis& a, int k, const std::int32_t* co) {
  if (a.in != a.out) return false;
  const std::int32_t* w = co + 2 * (std::int64_t)a.out;
  for (int x = 0; x < a.out; ++x) {
    const int start = co[2 * x], n = co[2 * x + 1];
    for (int t = 0; t < k; ++t) {
      const std::int32_t want = start + t == x && t < n ? (1 << px::kPillowPrecisionBits) : 0;
      if (w[(std::int64_t)x * k + t] != want) return false;
    }
  }
  return true;
}

}  // namespace

EpilogueTable epilogue_table(const px::Epilogue& e, int channels, simd::Level level) {
  EpilogueTable t;
  if (e.out == PixelType::kU8) return t;
  t.elem = e.out == PixelType::kF32 ? 4 : 2;
  t.bytes.resize((std::size_t)channels * 256 * t.elem);
  // store_resampled writes value i of a (channels, 256) "image": entry [c][u].
  for (int c = 0; c < channels; ++c)
    for (int u = 0; u < 256; ++u) px::store_resampled(e, t.bytes.data(), (std::int64_t)c * 256 + u, c, u);
  if (channels <= 4) {
    t.level = level;
    std::uint8_t all[256];
    for (int u = 0; u < 256; ++u) all[u] = (std::uint8_t)u;
    std::uint8_t got[256 * 4];
    const std::size_t bytes = (std::size_t)256 * t.elem;
    bool same = true;
    for (int c = 0; c < channels && same; ++c)
      same = simd::u8_to_float(level, float_out(e.out), all, 256, e.scale, px::kInv255, e.normalize, e.mean[c],
                               e.std[c], got) &&
             std::memcmp(got, t.bytes.data() + c * bytes, bytes) == 0;
    t.vector = same;
  }
  return t;
}

SimdPlan simd_prepare(simd::Level level, const ImageRef& im, const ImagePlan& p, const std::int32_t* co, int taps,
                      int channels) {
  SimdPlan sp;
  if (level == simd::Level::kScalar) return sp;
  const std::int32_t* hw = co + 2 * (std::int64_t)p.h.out;
  const std::int64_t ps = im.pixel_stride;
  const bool interleaved = im.channel_stride == 1 && (ps == 3 || ps == 4) && channels >= 3 && channels <= ps;
  if (!interleaved && ps != 1) return sp;
  sp.kind = interleaved ? SimdPlan::kInterleaved : SimdPlan::kPlanar;
  sp.h_identity = identity(p.h, taps, co);
  sp.v_identity = identity(p.v, p.ksize_v, co + px::axis_ints(p.h, p.ksize_h));
  for (;;) {
    sp.level = level;
    sp.weights.resize(interleaved ? simd::h_weights_bytes_interleaved(level, p.h.out, taps)
                                  : simd::h_weights_bytes_planar(level, p.h.out, taps));
    const bool fits = interleaved ? simd::h_weights_interleaved(level, co, hw, p.h.out, taps, channels, (int)ps,
                                                                sp.weights.data())
                                  : simd::h_weights_planar(level, co, hw, p.h.out, taps, sp.weights.data());
    if (fits || level == simd::Level::kAvx2) return sp;  // the AVX2 pieces take every int32 weight
    level = simd::Level::kAvx2;
  }
}

void simd_rows(const SimdPlan& sp, const EpilogueTable* table, const ImageRef& im, const ImagePlan& p,
               const std::int32_t* co, int taps, const ResizeSpec& spec, int y0, int y1, void* out_image,
               RawBuffer& scratch) {
  const simd::Level level = sp.level;
  const int out_w = spec.out_w, in_h = im.height, in_w = im.width, C = spec.channels;
  const bool interleaved = sp.kind == SimdPlan::kInterleaved;
  const std::int32_t* hb = co;
  const std::int32_t* vb = co + px::axis_ints(p.h, p.ksize_h);
  const std::int32_t* vw = vb + 2 * (std::int64_t)spec.out_h;
  const int kh = taps, kv = p.ksize_v;
  const auto* src = reinterpret_cast<const std::uint8_t*>(im.data);
  const std::int64_t cs = im.channel_stride, ps = im.pixel_stride, rs = im.row_stride;

  const int groups = interleaved ? 1 : C;             // planes of the intermediate rows
  if (sp.h_identity && sp.v_identity && (!interleaved || ps == C)) {
    // Both passes copies (a cast, or a flip, of the image at its size): each output row is stored
    // from its source row where it lies, without the intermediate rows.
    for (int g = 0; g < groups; ++g)
      for (int y = y0; y < y1; ++y)
        store_row(level, spec, table, im.flip, interleaved, g, src + (std::int64_t)y * rs + (std::int64_t)g * cs, y,
                  out_image);
    return;
  }
  const int lo = clampi(vb[2 * y0], 0, in_h - 1);
  const int hi = clampi(vb[2 * (y1 - 1)] + vb[2 * (y1 - 1) + 1] - 1, 0, in_h - 1) + 1;
  const int width = interleaved ? out_w * C : out_w;  // values per intermediate row
  const std::int64_t pitch = round_up(width, 32) + simd::kOverWrite;
  const std::int64_t group_bytes = (std::int64_t)(hi - lo) * pitch;
  // The bytes of one source row (of one plane) that belong to the image, and a
  // padded copy for rows a kernel's reads past the last tap would leave.
  const std::int64_t span = interleaved ? (std::int64_t)(in_w - 1) * ps + C : in_w;
  const std::int64_t copy_bytes = round_up(span + simd::kOverRead, 32);
  std::uint8_t* inter = scratch.get((std::size_t)(groups * group_bytes + pitch + 2 * copy_bytes));
  std::uint8_t* vrow = inter + groups * group_bytes;
  std::uint8_t* copy = vrow + pitch;
  const std::uint8_t* last = src + (std::int64_t)(in_h - 1) * rs + (std::int64_t)(in_w - 1) * ps +
                             (std::int64_t)(C - 1) * cs;

  // The source row r of plane g, or a padded copy of it (in copy slot `slot`)
  // when a kernel's reads past its last tap would leave the image.
  auto source_row = [&](int r, int g, int slot) {
    const std::uint8_t* row = src + (std::int64_t)r * rs + (std::int64_t)g * cs;
    if ((std::uintptr_t)row + (std::uintptr_t)(span - 1 + simd::kOverRead) > (std::uintptr_t)last) {
      std::uint8_t* c = copy + slot * copy_bytes;
      std::memcpy(c, row, (std::size_t)span);
      std::memset(c + span, 0, (std::size_t)(copy_bytes - span));
      row = c;
    }
    return row;
  };
  for (int g = 0; g < groups; ++g) {
    std::uint8_t* plane_rows = inter + g * group_bytes;
    if (sp.h_identity) {  // the rows themselves: C bytes a pixel, or one plane
      for (int r = lo; r < hi; ++r) {
        const std::uint8_t* row = src + (std::int64_t)r * rs + (std::int64_t)g * cs;
        std::uint8_t* d = plane_rows + (std::int64_t)(r - lo) * pitch;
        if (!interleaved || ps == C) {
          std::memcpy(d, row, (std::size_t)width);
        } else {
          for (int x = 0; x < out_w; ++x)
            for (int c = 0; c < C; ++c) d[x * C + c] = row[x * ps + c];
        }
      }
    } else if (interleaved) {
      for (int r = lo; r < hi; r += 2) {
        const bool two = r + 1 < hi;
        simd::h_rows_interleaved(level, source_row(r, g, 0), two ? source_row(r + 1, g, 1) : nullptr, C, (int)ps,
                                 out_w, kh, hb, sp.weights.data(), plane_rows + (std::int64_t)(r - lo) * pitch,
                                 two ? plane_rows + (std::int64_t)(r + 1 - lo) * pitch : nullptr);
      }
    } else {
      for (int r = lo; r < hi; ++r)
        simd::h_row_planar(level, source_row(r, g, 0), out_w, kh, hb, sp.weights.data(),
                           plane_rows + (std::int64_t)(r - lo) * pitch);
    }
  }

  std::vector<const std::uint8_t*> rows((std::size_t)std::max(kv, 1));
  for (int g = 0; g < groups; ++g) {
    const std::uint8_t* base = inter + g * group_bytes;
    for (int y = y0; y < y1; ++y) {
      if (sp.v_identity) {  // output row y is intermediate row y
        store_row(level, spec, table, im.flip, interleaved, g, base + (std::int64_t)(y - lo) * pitch, y, out_image);
        continue;
      }
      const int start = vb[2 * y], n = vb[2 * y + 1];
      for (int k = 0; k < n; ++k) rows[k] = base + (std::int64_t)(clampi(start + k, 0, in_h - 1) - lo) * pitch;
      simd::v_row(level, rows.data(), vw + (std::int64_t)y * kv, n, width, vrow);
      store_row(level, spec, table, im.flip, interleaved, g, vrow, y, out_image);
    }
  }
}

}  // namespace gdsio::image::detail
