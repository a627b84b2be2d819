// JPEG on the CPU through libjpeg-turbo's libjpeg API, linked into the engine
// when the build finds it (GDSIO_HAVE_LIBJPEG): a whole image or only a box of
// it, decoded straight into the caller's (H, W, C) memory. The box is what a
// crop keeps: rows above it are skipped (jpeg_skip_scanlines still reads their
// entropy-coded data, it runs no IDCT, upsampling or colour conversion for
// them), columns outside it are not decoded past the iMCU columns around it
// (jpeg_crop_scanline), rows below it are not read at all. The pixels equal
// those of a full decode (ISLOW IDCT, fancy upsampling, as Pillow decodes):
// the decoded window keeps a margin on each side of the box so that the
// upsampler sees the same neighbours as in a full decode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gdsio::image::jpeg {

// Whether this build has the libjpeg path, and the library's version
// ("libjpeg-turbo 2.1.5 (JPEG_LIB_VERSION 62)"), or why not.
bool available();
std::string version();

struct Box {
  int top = 0, left = 0, height = 0, width = 0;  // height/width 0: to the image's edge
};

struct Result {
  int image_height = 0, image_width = 0;  // the whole image's size
  bool warned = false;                    // libjpeg-turbo warned (corrupt data it went past)
  std::string warning;                    // its first warning
  int rows_decoded = 0;                   // rows run through IDCT and colour conversion
  int columns_decoded = 0;                // width of the decoded window
};

// Decodes `box` of the JPEG in [data, data + size) to `out`: box.height rows of
// box.width * channels bytes, `row_stride` bytes apart. channels 3: RGB, 1:
// grayscale (a grayscale JPEG only; a colour one raises). strict: a warning
// raises ValueError (the caller hands the file to a reader that decides), as
// simplejpeg's strict mode does. Raises ValueError naming libjpeg-turbo's
// message for data it refuses or a box outside the image; the GIL is the
// caller's business.
Result decode(const std::uint8_t* data, std::size_t size, Box box, int channels, std::uint8_t* out,
              std::size_t row_stride, bool strict);

// What libjpeg-turbo's header read says of one image (WholeImage::header).
struct Header {
  int height = 0, width = 0, components = 0;
  // The libjpeg-turbo paths take it: the rules of gdsio/image/jpeg_cpu.py's
  // header_refusal (8-bit Huffman-coded baseline, extended or progressive,
  // gray or YCbCr, a standard chroma subsampling), on libjpeg-turbo's reading.
  bool taken = false;
};

// One whole image in two steps on one decompressor (gdsio.image.decode of a
// single JPEG): the header, which the caller judges and sizes its output by
// (the GIL held: a few thousand instructions), then the pixels, straight into
// that output (the GIL released). ValueError from either for data
// libjpeg-turbo refuses; pixels() also for a warning (strict, as decode()).
class WholeImage {
 public:
  WholeImage();
  ~WholeImage();
  WholeImage(const WholeImage&) = delete;
  WholeImage& operator=(const WholeImage&) = delete;
  Header header(const std::uint8_t* data, std::size_t size);
  void pixels(int channels, std::uint8_t* out, std::size_t row_stride);

 private:
  struct State;
  // This thread's decompressor, created once and reset after each image (a
  // create and destroy an image cost a heap block and the memory manager's
  // setup), or one of this object's own while that one is in use.
  State* s_;
  bool own_;
};

// Whether the markers of the JPEG in [data, data + size) up to its first scan
// pass the checks gdsio/image/jpeg_header.py's parse_jpeg makes beyond
// libjpeg-turbo's: every segment at least its 2 length bytes (libjpeg-turbo
// skips an APPn or COM segment of length 0 or 1), the header within
// max_header_bytes. Markers are found as parse_jpeg finds them.
bool markers_pass(const std::uint8_t* data, std::size_t size, std::size_t max_header_bytes);

// Whether an EOI marker is in the last 32 bytes (parse_jpeg's has_eoi).
bool ends_with_eoi(const std::uint8_t* data, std::size_t size);

// One image of a batch: where its data is, the box, where it goes.
struct Job {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  Box box;
  int channels = 3;
  std::uint8_t* out = nullptr;
  std::size_t row_stride = 0;
  int expect_height = 0, expect_width = 0;  // the header's size as the caller read it (0: not checked)
};

// decode() of every job over `threads` of the engine's pool; per job an empty
// string, or the ValueError message that job raised (the others go on),
// a libjpeg-turbo size other than the job's expected one included.
std::vector<std::string> decode_many(const std::vector<Job>& jobs, bool strict, std::size_t threads);

}  // namespace gdsio::image::jpeg
