#include "image/jpeg_turbo.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "io/thread_pool.hpp"

#ifdef GDSIO_HAVE_LIBJPEG
#include <jpeglib.h>
#endif

namespace gdsio::image::jpeg {

#ifndef GDSIO_HAVE_LIBJPEG

bool available() { return false; }
std::string version() { return "not built: libjpeg-turbo's headers (jpeglib.h) were not found when gdsio was built"; }
Result decode(const std::uint8_t*, std::size_t, Box, int, std::uint8_t*, std::size_t, bool) {
  throw Unavailable("gdsio was built without libjpeg-turbo (" + version() + ")");
}

#else

namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool warned;
  char warning[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorMgr*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  auto* e = reinterpret_cast<ErrorMgr*>(c->err);
  if (!e->warned) (*c->err->format_message)(c, e->warning);
  e->warned = true;
  c->err->num_warnings++;
}

// A decompressor destroyed on every path out, longjmp included (the jump
// lands in decode(), whose frame owns this object).
struct Decompressor {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  bool created = false;
  ~Decompressor() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// The margin kept around the box on every side that has image beyond it:
// fancy upsampling reads one chroma sample (two pixels at 2x subsampling)
// past each output pixel, and the window's own edges are treated as image
// edges; 16 pixels cover any standard sampling factor.
constexpr int kMargin = 16;

}  // namespace

bool available() { return true; }

std::string version() {
#ifdef LIBJPEG_TURBO_VERSION
#define GDSIO_STR2(x) #x
#define GDSIO_STR(x) GDSIO_STR2(x)
  return std::string("libjpeg-turbo ") + GDSIO_STR(LIBJPEG_TURBO_VERSION) + " (JPEG_LIB_VERSION " +
         std::to_string(JPEG_LIB_VERSION) + ")";
#else
  return "libjpeg (JPEG_LIB_VERSION " + std::to_string(JPEG_LIB_VERSION) + ")";
#endif
}

Result decode(const std::uint8_t* data, std::size_t size, Box box, int channels, std::uint8_t* out,
              std::size_t row_stride, bool strict) {
  if (channels != 1 && channels != 3) throw ValueError("channels must be 1 or 3");
  if (size == 0) throw ValueError("empty JPEG data");
  Decompressor d;
  Result r;
  std::vector<std::uint8_t> row;  // the decoded window's row, when it is wider than the box
  int skip_to = 0, rows_read = 0;
  d.cinfo.err = jpeg_std_error(&d.err.pub);
  d.err.pub.error_exit = on_error;
  d.err.pub.emit_message = on_message;
  d.err.warned = false;
  d.err.message[0] = d.err.warning[0] = '\0';
  if (setjmp(d.err.jump)) {
    throw ValueError(std::string("libjpeg-turbo: ") + d.err.message);
  }
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  jpeg_mem_src(&d.cinfo, data, (unsigned long)size);
  jpeg_read_header(&d.cinfo, TRUE);
  const int H = (int)d.cinfo.image_height, W = (int)d.cinfo.image_width;
  r.image_height = H;
  r.image_width = W;
  if (box.height == 0) box.height = H - box.top;
  if (box.width == 0) box.width = W - box.left;
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || box.top + box.height > H ||
      box.left + box.width > W)
    throw ValueError("box (top " + std::to_string(box.top) + ", left " + std::to_string(box.left) + ", " +
                     std::to_string(box.height) + "x" + std::to_string(box.width) + ") is outside the " +
                     std::to_string(W) + "x" + std::to_string(H) + " image");
  if (channels == 1 && d.cinfo.num_components != 1)
    throw ValueError("grayscale output of a " + std::to_string(d.cinfo.num_components) + "-component JPEG");
  d.cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  d.cinfo.dct_method = JDCT_ISLOW;
  d.cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&d.cinfo);
  // The decoded window: the box and a margin, widened by jpeg_crop_scanline
  // to iMCU columns on the left.
  const int wl = box.left > kMargin ? box.left - kMargin : 0;
  const int wr = box.left + box.width + kMargin < W ? box.left + box.width + kMargin : W;
  JDIMENSION xoff = (JDIMENSION)wl, wwidth = (JDIMENSION)(wr - wl);
  if (wl > 0 || wr < W) jpeg_crop_scanline(&d.cinfo, &xoff, &wwidth);
  const int skip_x = box.left - (int)xoff;
  const bool direct = skip_x == 0 && (int)d.cinfo.output_width == box.width;
  r.columns_decoded = (int)d.cinfo.output_width;
  // Rows above the box: skipped to a margin above it, then read and dropped,
  // so the upsampler's context rows are decoded as in a full decode.
  skip_to = box.top > kMargin ? box.top - kMargin : 0;
  if (!direct || box.top > 0) row.resize((std::size_t)d.cinfo.output_width * channels);
  if (skip_to > 0) jpeg_skip_scanlines(&d.cinfo, (JDIMENSION)skip_to);
  while ((int)d.cinfo.output_scanline < box.top) {
    JSAMPROW p = row.data();
    if (jpeg_read_scanlines(&d.cinfo, &p, 1) != 1) throw ValueError("libjpeg-turbo returned no scanline");
    ++rows_read;
  }
  // Straight into `out`: as many rows a call as libjpeg-turbo gives (a row group), as TurboJPEG
  // asks; a call per row retired ~30k more instructions on a 500x375 image.
  constexpr int kRowsPerCall = 32;
  JSAMPROW rows[kRowsPerCall];
  for (int y = 0; direct && y < box.height;) {
    const int n = box.height - y < kRowsPerCall ? box.height - y : kRowsPerCall;
    for (int k = 0; k < n; ++k) rows[k] = out + (std::size_t)(y + k) * row_stride;
    const int got = (int)jpeg_read_scanlines(&d.cinfo, rows, (JDIMENSION)n);
    if (got <= 0) throw ValueError("libjpeg-turbo returned no scanline");
    y += got;
    rows_read += got;
  }
  for (int y = 0; !direct && y < box.height; ++y) {
    std::uint8_t* dst = out + (std::size_t)y * row_stride;
    JSAMPROW p = row.data();
    if (jpeg_read_scanlines(&d.cinfo, &p, 1) != 1) throw ValueError("libjpeg-turbo returned no scanline");
    std::memcpy(dst, row.data() + (std::size_t)skip_x * channels, (std::size_t)box.width * channels);
    ++rows_read;
  }
  r.rows_decoded = rows_read;
  r.warned = d.err.warned;
  r.warning = d.err.warning;
  if (strict && r.warned) throw ValueError(std::string("libjpeg-turbo warned: ") + d.err.warning);
  if ((int)d.cinfo.output_scanline == H)
    jpeg_finish_decompress(&d.cinfo);
  else
    jpeg_abort_decompress(&d.cinfo);
  // A warning while finishing (data past the last scanline) counts as well.
  if (strict && d.err.warned && !r.warned) throw ValueError(std::string("libjpeg-turbo warned: ") + d.err.warning);
  r.warned = d.err.warned;
  r.warning = d.err.warning;
  return r;
}

#endif  // GDSIO_HAVE_LIBJPEG

std::vector<std::string> decode_many(const std::vector<Job>& jobs, bool strict, std::size_t threads) {
  if (!available()) throw Unavailable("gdsio was built without libjpeg-turbo (" + version() + ")");
  std::vector<std::string> errors(jobs.size());
  parallel_for(jobs.size(), threads, [&](std::size_t, WorkQueue& q) {
    std::size_t i;
    while (q.claim(&i)) {
      const Job& j = jobs[i];
      try {
        const Result r = decode(j.data, j.size, j.box, j.channels, j.out, j.row_stride, strict);
        if (j.expect_height > 0 && (r.image_height != j.expect_height || r.image_width != j.expect_width))
          errors[i] = "libjpeg-turbo read " + std::to_string(r.image_width) + "x" + std::to_string(r.image_height) +
                      ", the header says " + std::to_string(j.expect_width) + "x" + std::to_string(j.expect_height);
      } catch (const std::invalid_argument& e) {  // ValueError: this image's, the others go on
        errors[i] = e.what();
        if (errors[i].empty()) errors[i] = "libjpeg-turbo failed";
      }
    }
  });
  return errors;
}

}  // namespace gdsio::image::jpeg
