// The CPU twin of the pad kernel (pad_cuda.cu): pad.hpp's index rule, one
// source column table shared by every row, rows copied or filled.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"
#include "io/thread_pool.hpp"

namespace gdsio::image {

namespace {

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::kConstant: return "constant";
    case PadMode::kEdge: return "edge";
    case PadMode::kReflect: return "reflect";
    default: return "symmetric";
  }
}

void check_axis(const PadAxis& a, PadMode m, const char* name) {
  GDSIO_EXPECT(a.in >= 1, ValueError, "pad: the image's ", name, " is 0");
  GDSIO_EXPECT(a.kept() >= 1, ValueError, "padding: negative padding (", a.before, ", ", a.after,
               ") crops away the whole ", name, " (", a.in, ")");
  const std::int64_t n = a.kept(), most = std::max(a.before, a.after);
  if (m == PadMode::kReflect)
    GDSIO_EXPECT(most < n, ValueError, "padding: padding_mode='reflect' needs padding smaller than the ", name,
                 " (", n, "), got ", most);
  if (m == PadMode::kSymmetric)
    GDSIO_EXPECT(most <= n, ValueError, "padding: padding_mode='symmetric' needs padding at most the ", name, " (",
                 n, "), got ", most);
  GDSIO_EXPECT(a.out() <= (std::int64_t)1 << 31, ValueError, "padding: the padded ", name, " (", a.out(),
               ") is too large");
}

template <typename E>
void pad_planes(const E* in, E* out, const PadSpec& s, const std::vector<std::int64_t>& cols, std::int64_t p0,
                std::int64_t p1) {
  const std::int64_t oh = s.rows.out(), ow = s.cols.out(), ih = s.rows.in, iw = s.cols.in;
  for (std::int64_t p = p0; p < p1; ++p) {
    E fill;
    const std::uint64_t bits = s.fill_of(p);
    std::memcpy(&fill, &bits, sizeof(E));  // the low bytes (little-endian hosts, as the device)
    const E* src = in + p * ih * iw;
    E* dst = out + p * oh * ow;
    for (std::int64_t y = 0; y < oh; ++y) {
      const std::int64_t sy = pad_source(s.rows, s.mode, y);
      E* d = dst + y * ow;
      if (sy < 0) {
        std::fill(d, d + ow, fill);
        continue;
      }
      const E* r = src + sy * iw;
      for (std::int64_t x = 0; x < ow; ++x) d[x] = cols[x] < 0 ? fill : r[cols[x]];
    }
  }
}

}  // namespace

void check_pad(const PadSpec& s) {
  GDSIO_EXPECT(s.elem_size == 1 || s.elem_size == 2 || s.elem_size == 4 || s.elem_size == 8, ValueError,
               "pad: element size ", s.elem_size, " is not 1, 2, 4 or 8 bytes");
  GDSIO_EXPECT(s.planes >= 0 && s.channels >= 1, ValueError, "pad: bad shape (", s.planes, " planes, ", s.channels,
               " channels)");
  GDSIO_EXPECT((int)s.mode >= 0 && (int)s.mode <= 3, ValueError, "padding_mode: unknown mode ", (int)s.mode);
  GDSIO_EXPECT(s.fill_count == 1 || (s.fill_count == s.channels && s.fill_count <= kMaxPadFill), ValueError,
               "fill: ", s.fill_count, " values for ", s.channels, " channels (give 1, or one per channel up to ",
               kMaxPadFill, ")");
  GDSIO_EXPECT(s.mode == PadMode::kConstant || s.fill_count == 1, ValueError,
               "fill: one value per channel is for padding_mode='constant' only, not '", mode_name(s.mode), "'");
  check_axis(s.rows, s.mode, "height");
  check_axis(s.cols, s.mode, "width");
}

void pad_cpu(std::uintptr_t in, std::uintptr_t out, const PadSpec& s, std::size_t threads) {
  check_pad(s);
  if (s.planes == 0) return;
  GDSIO_EXPECT(in != 0 && out != 0 && in != out, ValueError, "pad: null or identical input and output");
  std::vector<std::int64_t> cols((std::size_t)s.cols.out());
  for (std::int64_t x = 0; x < s.cols.out(); ++x) cols[(std::size_t)x] = pad_source(s.cols, s.mode, x);
  const std::int64_t per = std::max<std::int64_t>(1, (1 << 18) / std::max<std::int64_t>(1, s.rows.out() * s.cols.out()));
  const std::size_t items = (std::size_t)((s.planes + per - 1) / per);
  parallel_for(items, std::max<std::size_t>(1, threads), [&](std::size_t, WorkQueue& q) {
    std::size_t i;
    while (q.claim(&i)) {
      const std::int64_t p0 = (std::int64_t)i * per, p1 = std::min(s.planes, p0 + per);
      switch (s.elem_size) {
        case 1: pad_planes(reinterpret_cast<const std::uint8_t*>(in), reinterpret_cast<std::uint8_t*>(out), s, cols, p0, p1); break;
        case 2: pad_planes(reinterpret_cast<const std::uint16_t*>(in), reinterpret_cast<std::uint16_t*>(out), s, cols, p0, p1); break;
        case 4: pad_planes(reinterpret_cast<const std::uint32_t*>(in), reinterpret_cast<std::uint32_t*>(out), s, cols, p0, p1); break;
        default: pad_planes(reinterpret_cast<const std::uint64_t*>(in), reinterpret_cast<std::uint64_t*>(out), s, cols, p0, p1); break;
      }
    }
  });
}

#ifndef GDSIO_WITH_CUDA
void pad_cuda(std::uintptr_t, std::uintptr_t, const PadSpec&, int, std::uintptr_t) { throw_no_cuda(); }
#endif

}  // namespace gdsio::image
