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
struct WholeImage::State {};
WholeImage::WholeImage() : s_(nullptr), own_(false) {}
WholeImage::~WholeImage() = default;
Header WholeImage::header(const std::uint8_t*, std::size_t) {
  throw Unavailable("gdsio was built without libjpeg-turbo (" + version() + ")");
}
void WholeImage::pixels(int, std::uint8_t*, std::size_t) {
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

void start_error_mgr(Decompressor& d) {
  d.cinfo.err = jpeg_std_error(&d.err.pub);
  d.err.pub.error_exit = on_error;
  d.err.pub.emit_message = on_message;
  d.err.warned = false;
  d.err.message[0] = d.err.warning[0] = '\0';
}

// Output settings of every decode: Pillow's pixels (ISLOW IDCT, fancy upsampling).
void set_output(jpeg_decompress_struct& c, int channels) {
  c.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
}

// `height` rows straight into `out`, 32 row pointers filled at a time, each
// call asking for those not yet read (libjpeg-turbo gives up to a row group a
// call), as TurboJPEG asks; refilling the 32 pointers at every call retired
// 25k more instructions on a 500x375 image, a call per row 30k more. Returns
// the rows read. Runs under the caller's setjmp.
int read_rows_into(jpeg_decompress_struct& c, std::uint8_t* out, std::size_t row_stride, int height) {
  constexpr int kRowsPerCall = 32;
  JSAMPROW rows[kRowsPerCall];
  int y = 0;
  while (y < height) {
    const int n = height - y < kRowsPerCall ? height - y : kRowsPerCall;
    for (int k = 0; k < n; ++k) rows[k] = out + (std::size_t)(y + k) * row_stride;
    for (int done = 0; done < n;) {
      const int got = (int)jpeg_read_scanlines(&c, rows + done, (JDIMENSION)(n - done));
      if (got <= 0) throw ValueError("libjpeg-turbo returned no scanline");
      done += got;
    }
    y += n;
  }
  return y;
}

// jpeg_cpu.header_refusal's rules on libjpeg-turbo's reading of the header
// (its colour space follows the JFIF and Adobe markers and the component ids
// as parse_jpeg's colour does; a lossless, differential or 12-bit frame has
// already raised in jpeg_read_header).
bool taken(const jpeg_decompress_struct& c) {
  if (c.arith_code || c.data_precision != 8) return false;
  if (c.num_components == 1) return true;  // "gray", whatever its sampling factors
  if (c.num_components != 3 || c.jpeg_color_space != JCS_YCbCr) return false;
  const jpeg_component_info* k = c.comp_info;
  const int h1 = k[1].h_samp_factor, v1 = k[1].v_samp_factor;
  if (h1 != k[2].h_samp_factor || v1 != k[2].v_samp_factor || k[0].h_samp_factor % h1 || k[0].v_samp_factor % v1)
    return false;
  const int rh = k[0].h_samp_factor / h1, rv = k[0].v_samp_factor / v1;
  // 444, 422, 420, 440, 411 (not 410, nor the "other" ratios)
  return (rv == 1 && (rh == 1 || rh == 2 || rh == 4)) || (rv == 2 && (rh == 1 || rh == 2));
}

}  // namespace

struct WholeImage::State {
  Decompressor d;
  bool busy = false;
};

WholeImage::WholeImage() {
  static thread_local State mine;
  own_ = mine.busy;
  s_ = own_ ? new State : &mine;
  s_->busy = true;
}

WholeImage::~WholeImage() {
  // Back to the start state (the image's memory freed, the permanent pool
  // kept), whether the image finished, failed or was never read.
  if (s_->d.created) jpeg_abort_decompress(&s_->d.cinfo);
  s_->busy = false;
  if (own_) delete s_;
}

Header WholeImage::header(const std::uint8_t* data, std::size_t size) {
  Decompressor& d = s_->d;
  if (size == 0) throw ValueError("empty JPEG data");
  start_error_mgr(d);
  if (setjmp(d.err.jump)) throw ValueError(std::string("libjpeg-turbo: ") + d.err.message);
  if (!d.created) {
    jpeg_create_decompress(&d.cinfo);
    d.created = true;
  }
  jpeg_mem_src(&d.cinfo, data, (unsigned long)size);
  jpeg_read_header(&d.cinfo, TRUE);
  Header h;
  h.height = (int)d.cinfo.image_height;
  h.width = (int)d.cinfo.image_width;
  h.components = d.cinfo.num_components;
  h.taken = taken(d.cinfo);
  return h;
}

void WholeImage::pixels(int channels, std::uint8_t* out, std::size_t row_stride) {
  Decompressor& d = s_->d;
  if (!d.created) throw ValueError("no header read");
  if (channels != 1 && channels != 3) throw ValueError("channels must be 1 or 3");
  if (channels == 1 && d.cinfo.num_components != 1)
    throw ValueError("grayscale output of a " + std::to_string(d.cinfo.num_components) + "-component JPEG");
  if (setjmp(d.err.jump)) throw ValueError(std::string("libjpeg-turbo: ") + d.err.message);
  set_output(d.cinfo, channels);
  jpeg_start_decompress(&d.cinfo);
  read_rows_into(d.cinfo, out, row_stride, (int)d.cinfo.output_height);
  if (d.err.warned) throw ValueError(std::string("libjpeg-turbo warned: ") + d.err.warning);
  jpeg_finish_decompress(&d.cinfo);
  // A warning while finishing (data past the last scanline) counts as well.
  if (d.err.warned) throw ValueError(std::string("libjpeg-turbo warned: ") + d.err.warning);
}

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
  start_error_mgr(d);
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
  set_output(d.cinfo, channels);
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
  if (direct) rows_read += read_rows_into(d.cinfo, out, row_stride, box.height);
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

bool markers_pass(const std::uint8_t* p, std::size_t n, std::size_t max_header_bytes) {
  if (n < 2 || p[0] != 0xFF || p[1] != 0xD8) return false;
  std::size_t pos = 2;
  for (;;) {
    int m = 0;
    while (m == 0) {  // the next marker, as parse_jpeg's _next_marker: bytes before it, fill bytes, 0xFF00 skipped
      if (pos >= n || pos > max_header_bytes) return false;
      const void* ff = std::memchr(p + pos, 0xFF, n - pos);
      if (ff == nullptr) return false;
      pos = (std::size_t)(static_cast<const std::uint8_t*>(ff) - p);
      while (pos + 1 < n && p[pos + 1] == 0xFF) ++pos;
      if (pos + 1 >= n) return false;
      m = p[pos + 1];
      pos += 2;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // TEM, RSTn: no length
    if (m == 0xD8 || m == 0xD9 || pos + 2 > n) return false;  // parse_jpeg raises (libjpeg-turbo as well)
    const std::size_t length = (std::size_t)p[pos] << 8 | p[pos + 1];
    const std::size_t end = pos + length;
    if (length < 2 || end > max_header_bytes || end > n) return false;
    if (m == 0xDA) return true;  // the first scan
    pos = end;
  }
}

bool ends_with_eoi(const std::uint8_t* p, std::size_t n) {
  const std::size_t from = n > 32 ? n - 32 : 0;
  for (std::size_t i = from; i + 1 < n; ++i)
    if (p[i] == 0xFF && p[i + 1] == 0xD9) return true;
  return false;
}

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
