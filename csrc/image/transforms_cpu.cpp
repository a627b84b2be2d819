// The CPU twin of the transforms: the library's CPU path and the oracle of
// the GPU tests. The arithmetic is resample.hpp's; this file only schedules
// it on gdsio's thread pool.
#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/resize_cpu_simd.hpp"
#include "image/transforms.hpp"
#include "io/thread_pool.hpp"

namespace gdsio::image {

using px::clampi;

namespace {

constexpr std::int32_t kMaxSide = 1 << 16;  // per output side (keeps CUDA grids within limits)

const char* filter_name(Filter f) {
  switch (f) {
    case Filter::kNearest: return "nearest";
    case Filter::kBox: return "box";
    case Filter::kBilinear: return "bilinear";
    case Filter::kBicubic: return "bicubic";
  }
  return "?";
}

// Scratch of one worker: the horizontally resampled rows and the vertical accumulators.
struct Scratch {
  std::vector<std::uint8_t> rows;
  std::vector<std::int32_t> acc;
  detail::RawBuffer simd;
};

template <Arith A>
using Inter = std::conditional_t<A == Arith::kPillow8, std::uint8_t, std::int32_t>;

// Output rows [y0, y1) of every channel of one image: Pillow's two passes
// (or OpenCV's), the horizontal one over just the source rows these rows
// need. All channels share one walk over the windows, as Pillow's RGBX rows
// do, and the intermediate rows stay planar so that the vertical pass and
// the epilogue run over contiguous values (vectorized). `taps`: every
// horizontal window's, padded (see pad_windows).
template <Arith A, int C>
void resize_rows(const ImageRef& im, int taps, const detail::ImagePlan& p, const std::int32_t* co,
                 const ResizeSpec& spec, int y0, int y1, void* out_image, Scratch& s) {
  using T = Inter<A>;
  const int out_w = spec.out_w, in_h = im.height;
  const std::int32_t* hb = co;
  const std::int32_t* hw = co + 2 * (std::int64_t)out_w;
  const std::int32_t* vb = co + px::axis_ints(p.h, p.ksize_h);
  const std::int32_t* vw = vb + 2 * (std::int64_t)spec.out_h;
  const int kh = taps, kv = p.ksize_v;
  const auto* src = reinterpret_cast<const std::uint8_t*>(im.data);
  const std::int64_t cs = im.channel_stride, ps = im.pixel_stride;

  const int lo = clampi(vb[2 * y0], 0, in_h - 1);
  const int hi = clampi(vb[2 * (y1 - 1)] + vb[2 * (y1 - 1) + 1] - 1, 0, in_h - 1) + 1;
  const std::int64_t inter_plane = (std::int64_t)(hi - lo) * out_w;

  s.rows.resize(sizeof(T) * (std::size_t)(inter_plane * C));
  T* inter = reinterpret_cast<T*>(s.rows.data());
  // Windows padded to kh taps (see pad_windows) give every x the same trip
  // count: the branch predictor learns it, where varying counts mispredict.
  for (int r = lo; r < hi; ++r) {
    const std::uint8_t* row = src + r * im.row_stride;
    T* trow = inter + (std::int64_t)(r - lo) * out_w;
    for (int x = 0; x < out_w; ++x) {
      const std::uint8_t* sp = row + hb[2 * x] * ps;
      const std::int32_t* w = hw + (std::int64_t)x * kh;
      int ss[C];
      for (int c = 0; c < C; ++c) ss[c] = px::h_init(A);
      for (int k = 0; k < kh; ++k) {
        const int wk = w[k];
        for (int c = 0; c < C; ++c) ss[c] += sp[c * cs + k * ps] * wk;
      }
      for (int c = 0; c < C; ++c) trow[c * inter_plane + x] = (T)px::h_finish(A, ss[c]);
    }
  }

  s.acc.resize(out_w);
  std::int32_t* __restrict acc = s.acc.data();
  const px::Epilogue& e = spec.epilogue;
  const std::int64_t plane = (std::int64_t)spec.out_h * out_w;
  const int init = px::v_init(A);
  for (int c = 0; c < C; ++c) {
    const T* inter_c = inter + c * inter_plane;
    for (int y = y0; y < y1; ++y) {
      const int start = vb[2 * y], n = vb[2 * y + 1];
      const std::int32_t* w = vw + (std::int64_t)y * kv;
      for (int x = 0; x < out_w; ++x) acc[x] = init;
      for (int k = 0; k < n; ++k) {
        const T* __restrict trow = inter_c + (std::int64_t)(clampi(start + k, 0, in_h - 1) - lo) * out_w;
        const int wk = w[k];
        for (int x = 0; x < out_w; ++x) acc[x] += px::v_term(A, trow[x], wk);
      }
      const std::int64_t base = c * plane + (std::int64_t)y * out_w;
      if (e.out == PixelType::kU8) {
        std::uint8_t* __restrict o = static_cast<std::uint8_t*>(out_image) + base;
        if (im.flip) {
          for (int x = 0; x < out_w; ++x) o[out_w - 1 - x] = (std::uint8_t)px::v_finish(A, acc[x]);
        } else {
          for (int x = 0; x < out_w; ++x) o[x] = (std::uint8_t)px::v_finish(A, acc[x]);
        }
      } else {
        for (int x = 0; x < out_w; ++x)
          px::store_resampled(e, out_image, base + (im.flip ? out_w - 1 - x : x), c, px::v_finish(A, acc[x]));
      }
    }
  }
}

// Nearest (Pillow's or OpenCV's): one tap per axis, so the two passes reduce
// to a gather; the result is the same bytes.
void nearest_rows(const ImageRef& im, const detail::ImagePlan& p, const std::int32_t* co, const ResizeSpec& spec,
                  int y0, int y1, void* out_image, Scratch& s) {
  const int out_w = spec.out_w;
  const std::int32_t* vb = co + px::axis_ints(p.h, p.ksize_h);
  const std::int64_t plane = (std::int64_t)spec.out_h * out_w;
  const px::Epilogue& e = spec.epilogue;
  // The source columns, contiguous and (flipped) in output order: the inner
  // loop is then a plain gather the compiler need not guard against aliasing.
  s.acc.resize(out_w);
  std::int32_t* __restrict xs = s.acc.data();
  for (int x = 0; x < out_w; ++x) xs[im.flip ? out_w - 1 - x : x] = co[2 * x] * (std::int32_t)im.pixel_stride;
  for (int c = 0; c < spec.channels; ++c) {
    const auto* src = reinterpret_cast<const std::uint8_t*>(im.data) + c * im.channel_stride;
    for (int y = y0; y < y1; ++y) {
      const std::uint8_t* __restrict row = src + (std::int64_t)clampi(vb[2 * y], 0, im.height - 1) * im.row_stride;
      const std::int64_t base = c * plane + (std::int64_t)y * out_w;
      if (e.out == PixelType::kU8) {
        std::uint8_t* __restrict o = static_cast<std::uint8_t*>(out_image) + base;
        for (int x = 0; x < out_w; ++x) o[x] = row[xs[x]];
      } else {
        for (int x = 0; x < out_w; ++x) px::store_resampled(e, out_image, base + x, c, row[xs[x]]);
      }
    }
  }
}

// Gives every horizontal window the same number of taps, K, all inside the
// row: the longest window's count (at most the row, so K always fits; often
// below ksize, which bounds every window of the axis). A window that would
// read past the row's end moves left and its weights right (zero weights add
// nothing to the integer sums). The weights are re-laid K to a window (the
// axis keeps its ksize-long slots; the vertical axis stays where it is).
// Returns K.
int pad_windows(const px::Axis& a, int ksize, std::int32_t* co) {
  std::int32_t* bounds = co;
  std::int32_t* w = co + 2 * (std::int64_t)a.out;
  int taps = 1;
  for (int i = 0; i < a.out; ++i) taps = std::max(taps, (int)bounds[2 * i + 1]);
  std::vector<std::int32_t> keep((std::size_t)taps);
  for (int i = 0; i < a.out; ++i) {
    // Window i moves from slot i * ksize to i * taps, never past its old
    // place nor into window i + 1's: its weights are read out first.
    const std::int32_t* from = w + (std::int64_t)i * ksize;
    std::int32_t* to = w + (std::int64_t)i * taps;
    const int start = bounds[2 * i], n = bounds[2 * i + 1];
    const int shift = std::max(0, start + taps - a.in);
    std::copy(from, from + n, keep.begin());
    std::fill(to, to + taps, 0);
    std::copy(keep.begin(), keep.begin() + n, to + shift);
    bounds[2 * i] = start - shift;
    bounds[2 * i + 1] = taps;
  }
  return taps;
}

using RowsFn = void (*)(const ImageRef&, int, const detail::ImagePlan&, const std::int32_t*, const ResizeSpec&,
                        int, int, void*, Scratch&);

template <Arith A>
RowsFn rows_fn(int channels) {
  switch (channels) {
    case 1: return &resize_rows<A, 1>;
    case 2: return &resize_rows<A, 2>;
    case 3: return &resize_rows<A, 3>;
    default: return &resize_rows<A, 4>;
  }
}

std::size_t elem_size(PixelType t) { return t == PixelType::kU8 ? 1 : t == PixelType::kF32 ? 4 : 2; }

}  // namespace

namespace detail {

Arith arith_of(const ResizeSpec& spec) {
  return spec.ref == Reference::kOpenCV && spec.filter != Filter::kNearest ? Arith::kOpenCV8 : Arith::kPillow8;
}

std::vector<ImagePlan> plan_resize(const std::vector<ImageRef>& images, const ResizeSpec& spec) {
  std::vector<ImagePlan> plans(images.size());
  std::int64_t off = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    ImagePlan& p = plans[i];
    p.h = px::Axis{images[i].width, spec.out_w, spec.filter, spec.ref, false};
    p.v = px::Axis{images[i].height, spec.out_h, spec.filter, spec.ref, true};
    p.ksize_h = px::axis_ksize(p.h);
    p.ksize_v = px::axis_ksize(p.v);
    p.offset = off;
    p.ints = px::axis_ints(p.h, p.ksize_h) + px::axis_ints(p.v, p.ksize_v);
    off += p.ints;
  }
  return plans;
}

}  // namespace detail

void check_resize(const std::vector<ImageRef>& images, const ResizeSpec& spec) {
  GDSIO_EXPECT(!images.empty(), ValueError, "images: the batch is empty");
  GDSIO_EXPECT(spec.channels >= 1 && spec.channels <= 4, ValueError,
               "images: 1 to 4 channels are supported, got ", spec.channels);
  GDSIO_EXPECT(spec.out_h >= 1 && spec.out_w >= 1 && spec.out_h <= kMaxSide && spec.out_w <= kMaxSide, ValueError,
               "size: the output must be between 1 and ", kMaxSide, " pixels a side, got ", spec.out_h, "x",
               spec.out_w);
  GDSIO_EXPECT(spec.ref == Reference::kPillow || spec.filter == Filter::kNearest || spec.filter == Filter::kBilinear,
               ValueError, "interpolation: antialias=False follows OpenCV and is defined for 'nearest' and ",
               "'bilinear' only, not '", filter_name(spec.filter), "'");
  const px::Epilogue& e = spec.epilogue;
  GDSIO_EXPECT(e.out != PixelType::kU8 || (!e.scale && !e.normalize), ValueError,
               "dtype: scaling or normalizing needs a float output dtype");
  if (e.normalize) {
    for (int c = 0; c < spec.channels; ++c)
      GDSIO_EXPECT(e.std[c] != 0.f, ValueError, "std: channel ", c, " has std 0 (division by zero)");
  }
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ImageRef& im = images[i];
    GDSIO_EXPECT(im.data != 0, ValueError, "images[", i, "]: null data pointer");
    GDSIO_EXPECT(im.height >= 1 && im.width >= 1, ValueError, "images[", i, "]: empty image (", im.height, "x",
                 im.width, ")");
    GDSIO_EXPECT(im.pixel_stride >= 1 && im.row_stride >= (im.width - 1) * im.pixel_stride + 1 &&
                     (spec.channels == 1 || im.channel_stride >= 1),
                 ValueError, "images[", i, "]: bad strides (row ", im.row_stride, ", channel ", im.channel_stride,
                 ", pixel ", im.pixel_stride, ")");
  }
}

std::size_t resize_workspace_bytes(const std::vector<ImageRef>& images, const ResizeSpec& spec) {
  check_resize(images, spec);
  auto plans = detail::plan_resize(images, spec);
  return (std::size_t)(plans.back().offset + plans.back().ints) * sizeof(std::int32_t);
}

std::vector<std::int32_t> resize_windows(const std::vector<ImageRef>& images, const ResizeSpec& spec) {
  check_resize(images, spec);
  const auto plans = detail::plan_resize(images, spec);
  std::vector<std::int32_t> coeffs((std::size_t)(plans.back().offset + plans.back().ints));
  for (const auto& p : plans) {
    px::axis_coeffs(p.h, p.ksize_h, coeffs.data() + p.offset);
    px::axis_coeffs(p.v, p.ksize_v, coeffs.data() + p.offset + px::axis_ints(p.h, p.ksize_h));
  }
  return coeffs;
}

namespace {

// One geometry's windows (both axes, padded where they can be) and its SIMD
// plan: what every image of that geometry shares.
struct Windows {
  std::vector<std::int32_t> co;  // horizontal then vertical axis, as axis_coeffs lays them out
  int taps = 0;                  // of every horizontal window, its weights re-laid (pad_windows)
  detail::SimdPlan simd;
};

// The windows depend on the two axes alone, the SIMD plan also on the level
// and on the memory layout it reads (pixel stride, interleaved or not).
using WindowsKey = std::tuple<int, int, int, int, int, int, int, std::int64_t, bool, int>;

std::shared_ptr<const Windows> make_windows(const detail::ImagePlan& p, const ImageRef& im, simd::Level level,
                                            int channels) {
  auto w = std::make_shared<Windows>();
  w->co.resize((std::size_t)p.ints);
  px::axis_coeffs(p.h, p.ksize_h, w->co.data());
  px::axis_coeffs(p.v, p.ksize_v, w->co.data() + px::axis_ints(p.h, p.ksize_h));
  w->taps = pad_windows(p.h, p.ksize_h, w->co.data());
  w->simd = detail::simd_prepare(level, im, p, w->co.data(), w->taps, channels);
  return w;
}

// The windows of the last few geometries, within a call and across calls:
// images of one size (a batch's, a dataset of equal photos, video frames, the
// batches of a fixed-size Resize) compute their windows once. Computing them
// takes about a tenth of a photo's SIMD resize (Pillow's double-precision
// filter, the weights re-laid for the kernels).
class WindowsCache {
 public:
  std::shared_ptr<const Windows> get(const WindowsKey& key, const detail::ImagePlan& p, const ImageRef& im,
                                     simd::Level level, int channels) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first == key) {
          entries_.splice(entries_.begin(), entries_, it);  // most recent first
          return entries_.front().second;
        }
      }
    }
    auto w = make_windows(p, im, level, channels);
    const std::size_t bytes = w->co.size() * sizeof(std::int32_t) + w->simd.weights.size();
    if (bytes > kMaxEntryBytes) return w;  // a huge axis is not kept
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& e : entries_)
      if (e.first == key) return e.second;  // another thread made it meanwhile: one entry per key
    entries_.emplace_front(key, w);
    if (entries_.size() > kEntries) entries_.pop_back();
    return w;
  }

 private:
  static constexpr std::size_t kEntries = 16;
  static constexpr std::size_t kMaxEntryBytes = std::size_t(4) << 20;
  std::mutex mu_;
  std::list<std::pair<WindowsKey, std::shared_ptr<const Windows>>> entries_;
};

WindowsCache& windows_cache() {
  static WindowsCache* c = new WindowsCache();  // never destroyed: threads may resize at exit
  return *c;
}

}  // namespace

void resize_cpu(const std::vector<ImageRef>& images, const ResizeSpec& spec, std::uintptr_t out,
                std::size_t threads) {
  check_resize(images, spec);
  GDSIO_EXPECT(out != 0, ValueError, "out: null pointer");
  if (threads < 1) threads = 1;
  const auto plans = detail::plan_resize(images, spec);
  const Arith arith = detail::arith_of(spec);
  const bool nearest = spec.filter == Filter::kNearest;
  // The SIMD schedule takes Pillow's arithmetic on padded windows; its
  // results are the scalar loops' (tests compare the levels byte for byte).
  const simd::Level level = arith == Arith::kPillow8 && !nearest ? simd::level() : simd::Level::kScalar;
  const detail::EpilogueTable table =
      level != simd::Level::kScalar ? detail::epilogue_table(spec.epilogue, spec.channels, level) : detail::EpilogueTable{};
  // Images of one geometry (the crop's size and the memory layout the SIMD
  // plan reads: a batch's images, equal crops, repeated calls) share one
  // Windows, from the cache.
  std::vector<std::shared_ptr<const Windows>> windows(images.size());
  parallel_for(images.size(), threads, [&](std::size_t, WorkQueue& q) {
    std::size_t i;
    while (q.claim(&i)) {
      const auto& p = plans[i];
      const WindowsKey key(p.h.in, p.h.out, p.v.in, p.v.out, (int)spec.filter, (int)spec.ref, (int)level,
                           images[i].pixel_stride, images[i].channel_stride == 1, spec.channels);
      windows[i] = windows_cache().get(key, p, images[i], level, spec.channels);
    }
  });

  // Items are (image, band of output rows): whole images when there are
  // enough of them; otherwise bands, whose horizontal passes overlap by a
  // window (a few rows), so that a single image still uses every thread.
  const int out_h = spec.out_h;
  const std::size_t n_img = images.size();
  int bands = 1;
  if (threads > 1 && n_img < 4 * threads) bands = (int)std::min<std::size_t>((4 * threads + n_img - 1) / n_img, (std::size_t)out_h);
  const int band_rows = (out_h + bands - 1) / bands;
  bands = (out_h + band_rows - 1) / band_rows;
  const std::int64_t image_bytes =
      (std::int64_t)spec.channels * spec.out_h * spec.out_w * (std::int64_t)elem_size(spec.epilogue.out);
  const RowsFn fn = arith == Arith::kPillow8 ? rows_fn<Arith::kPillow8>(spec.channels)
                                             : rows_fn<Arith::kOpenCV8>(spec.channels);

  std::vector<Scratch> scratch(std::min<std::size_t>(threads, n_img * bands));
  parallel_for(n_img * bands, threads, [&](std::size_t worker, WorkQueue& q) {
    std::size_t item;
    Scratch& s = scratch[worker];
    while (q.claim(&item)) {
      const std::size_t n = item / bands;
      const int band = (int)(item % bands);
      const int y0 = band * band_rows, y1 = std::min(out_h, y0 + band_rows);
      void* dst = reinterpret_cast<std::uint8_t*>(out) + (std::int64_t)n * image_bytes;
      const Windows& w = *windows[n];
      const std::int32_t* co = w.co.data();
      if (nearest)
        nearest_rows(images[n], plans[n], co, spec, y0, y1, dst, s);
      else if (w.simd.kind != detail::SimdPlan::kNone)
        detail::simd_rows(w.simd, &table, images[n], plans[n], co, w.taps, spec, y0, y1, dst, s.simd);
      else
        fn(images[n], w.taps, plans[n], co, spec, y0, y1, dst, s);
    }
  });
}

#ifndef GDSIO_WITH_CUDA
// A build without nvcc: the GPU launchers exist and say so.
void resize_cuda(const std::vector<ImageRef>&, const ResizeSpec&, std::uintptr_t, std::uintptr_t, std::size_t, int,
                 std::uintptr_t) {
  throw_no_cuda();
}
#endif

}  // namespace gdsio::image
