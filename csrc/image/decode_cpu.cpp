// The CPU twin of the uncompressed decoders: the same per-pixel functions as
// the kernels (pixel_formats.hpp), spread over gdsio's thread pool in row
// bands. Also the job validation both paths share, and, in a build without
// CUDA, the GPU launcher that says so.
#include <algorithm>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "image/decode.hpp"
#include "image/pixel_formats.hpp"
#include "io/thread_pool.hpp"

namespace gdsio::image {

std::size_t sample_bytes(Sample s) {
  switch (s) {
    case Sample::kU8: return 1;
    case Sample::kU16LE:
    case Sample::kU16BE: return 2;
    case Sample::kF32LE:
    case Sample::kF32BE: return 4;
  }
  return 0;
}

std::size_t out_bytes(OutType t) {
  switch (t) {
    case OutType::kU8: return 1;
    case OutType::kU16: return 2;
    case OutType::kF32: return 4;
  }
  return 0;
}

namespace {

// Dimensions beyond these are refused before any arithmetic can overflow; the
// Python layer caps pixels per image far below (gdsio.image.MAX_IMAGE_PIXELS).
constexpr std::int64_t kMaxSide = std::int64_t{1} << 31;
constexpr std::int64_t kMaxStride = std::int64_t{1} << 40;
constexpr std::int32_t kMaxChannels = 1 << 16;

bool integer_sample(Sample s) { return s == Sample::kU8 || s == Sample::kU16LE || s == Sample::kU16BE; }

OutType natural_out(Sample s) {
  switch (s) {
    case Sample::kU8: return OutType::kU8;
    case Sample::kU16LE:
    case Sample::kU16BE: return OutType::kU16;
    default: return OutType::kF32;
  }
}

}  // namespace

void validate_pixel_job(const PixelJob& j, std::size_t index) {
  validate_pixel_job(j, detail::concat("pixel job ", index));
}

void validate_pixel_job(const PixelJob& j, const std::string& label) {
  auto fail = [&](const std::string& why) { throw ValueError(label + ": " + why); };
  if (!j.src) fail("source pointer is null");
  if (!j.dst) fail("destination pointer is null");
  const auto s = static_cast<std::int32_t>(j.sample);
  const auto o = static_cast<std::int32_t>(j.out);
  const auto cv = static_cast<std::int32_t>(j.convert);
  if (s < 0 || s > 4) fail(detail::concat("unknown sample type ", s));
  if (o < 0 || o > 2) fail(detail::concat("unknown output type ", o));
  if (cv < 0 || cv > 2) fail(detail::concat("unknown channel conversion ", cv));
  if (j.height < 1 || j.width < 1 || j.height >= kMaxSide || j.width >= kMaxSide)
    fail(detail::concat("bad size ", j.height, "x", j.width));
  if (j.src_channels < 1 || j.src_channels > kMaxChannels || j.dst_channels < 1 || j.dst_channels > kMaxChannels)
    fail(detail::concat("bad channel counts ", j.src_channels, " -> ", j.dst_channels));
  if (j.stride_c < 0 || j.stride_y < 0 || j.stride_x < 0 || j.stride_c >= kMaxStride ||
      j.stride_y >= kMaxStride || j.stride_x >= kMaxStride)
    fail(detail::concat("bad strides (", j.stride_c, ", ", j.stride_y, ", ", j.stride_x, ")"));
  if (j.out != natural_out(j.sample))
    fail(detail::concat("sample type ", s, " cannot be written as output type ", o));
  switch (j.convert) {
    case Convert::kCopy:
      if (j.dst_channels > j.src_channels)
        fail(detail::concat("copy conversion needs dst_channels <= src_channels, got ", j.src_channels, " -> ",
                            j.dst_channels));
      break;
    case Convert::kLuma:
      if (j.src_channels < 3 || j.dst_channels != 1)
        fail(detail::concat("luma conversion needs >= 3 source channels and 1 output channel, got ",
                            j.src_channels, " -> ", j.dst_channels));
      break;
    case Convert::kReplicate: break;
  }
  if (j.maxval != 0) {
    if (!integer_sample(j.sample)) fail("maxval rescaling applies to integer samples only");
    const std::uint32_t out_max = j.out == OutType::kU8 ? 255u : 65535u;
    if (j.maxval > out_max) fail(detail::concat("maxval ", j.maxval, " exceeds the output range ", out_max));
  }
  // The farthest sample any output pixel reads, in 128-bit arithmetic.
  const std::int32_t channels_read = j.convert == Convert::kReplicate ? 1
                                     : j.convert == Convert::kLuma   ? 3
                                                                     : j.dst_channels;
  const unsigned __int128 last = static_cast<unsigned __int128>(channels_read - 1) * j.stride_c +
                                 static_cast<unsigned __int128>(j.height - 1) * j.stride_y +
                                 static_cast<unsigned __int128>(j.width - 1) * j.stride_x;
  const unsigned __int128 need = (last + 1) * sample_bytes(j.sample);
  if (need > j.src_bytes)
    fail(detail::concat("the samples reach byte ", static_cast<std::uint64_t>(need), " but the source holds ",
                        j.src_bytes, " bytes"));
}

void decode_pixels_cpu(const std::vector<PixelJob>& jobs, std::size_t threads) {
  for (std::size_t i = 0; i < jobs.size(); ++i) validate_pixel_job(jobs[i], i);
  // Bands of about 64 Ki pixels: small enough to balance, large enough that
  // claiming a band costs nothing next to decoding it.
  constexpr std::int64_t kBandPixels = 1 << 16;
  struct Band {
    std::size_t job;
    std::int64_t y0, y1;
  };
  std::vector<Band> bands;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const PixelJob& j = jobs[i];
    const std::int64_t rows = std::max<std::int64_t>(1, kBandPixels / j.width);
    for (std::int64_t y = 0; y < j.height; y += rows) bands.push_back({i, y, std::min(j.height, y + rows)});
  }
  parallel_for(bands.size(), std::max<std::size_t>(threads, 1), [&](std::size_t, WorkQueue& q) {
    std::size_t b;
    while (q.claim(&b)) {
      const Band& band = bands[b];
      // A local copy: stores through the uint8 output may alias anything, and
      // would otherwise force a reload of every job field per pixel.
      const PixelJob j = jobs[band.job];
      px::with_job_types(j, [&](auto s, auto c) {
        for (std::int64_t y = band.y0; y < band.y1; ++y)
          for (std::int64_t x = 0; x < j.width; ++x) px::decode_pixel<decltype(s)::value, decltype(c)::value>(j, y, x);
      });
    }
  });
}

#ifndef GDSIO_WITH_CUDA
std::size_t decode_pixels_cuda(const std::vector<PixelJob>& jobs, int, std::uintptr_t) {
  for (std::size_t i = 0; i < jobs.size(); ++i) validate_pixel_job(jobs[i], i);
  throw_no_cuda();
}
#endif

}  // namespace gdsio::image
