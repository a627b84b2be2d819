// libjpeg-turbo on the CPU (csrc/image/jpeg_turbo.hpp): the bitstream and the
// output cross as arrays (one validated view each, bindings/arrays.hpp), the
// GIL is released while decoding. gdsio/image/jpeg_cpu.py parses the header,
// allocates the output and calls this; for one whole image
// (jpeg_cpu_decode_image) the header and the output are made here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings/arrays.hpp"
#include "bindings/registry.hpp"
#include "bindings/structs.hpp"
#include "core/error.hpp"
#include "core/host_pool.hpp"
#include "image/jpeg_turbo.hpp"

namespace py = pybind11;

namespace {

using gdsio::bindings::Array;
using gdsio::image::jpeg::Job;

// One job from its two arrays: `data` the bitstream (dense uint8 host
// memory), `out` the box's (height, width, channels) uint8 pixels in host
// memory, channels adjacent, pixels `channels` apart, rows any distance apart
// that does not overlap them. The views go to `keep`, which outlives the decode.
Job job_of(py::handle data_obj, int top, int left, py::handle out_obj, const std::string& prefix,
           std::vector<Array>& keep) {
  const Array& data = keep.emplace_back(gdsio::bindings::view(data_obj, prefix + "data"));
  data.on(-1).of(gdsio::bindings::kUInt8).is_dense();
  const Array& out = keep.emplace_back(gdsio::bindings::view(out_obj, prefix + "out"));
  out.on(-1).writable().of(gdsio::bindings::kUInt8).dims(3);
  const std::int64_t h = out.shape[0], w = out.shape[1], c = out.shape[2];
  if (h <= 0 || w <= 0 || h > INT32_MAX || w > INT32_MAX)
    throw gdsio::ValueError(out.name + ": has shape (" + std::to_string(h) + ", " + std::to_string(w) + ", " +
                            std::to_string(c) + "): the box must have a positive height and width");
  if (c != 1 && c != 3)
    throw gdsio::ValueError(out.name + ": has " + std::to_string(c) + " channels, expected 1 (gray) or 3 (RGB)");
  out.unit_stride(2);
  if (w > 1 && out.strides[1] != c)
    throw gdsio::ValueError(out.name + ": has pixel stride " + std::to_string(out.strides[1]) + ", expected " +
                            std::to_string(c) + " (interleaved pixels)");
  const std::int64_t row_stride = h > 1 ? out.strides[0] : w * c;
  if (row_stride < w * c)
    throw gdsio::ValueError(out.name + ": has row stride " + std::to_string(row_stride) + ", rows of " +
                            std::to_string(w * c) + " bytes would overlap");
  Job j;
  j.data = reinterpret_cast<const std::uint8_t*>(data.data);
  j.size = static_cast<std::size_t>(data.numel());
  j.box = {top, left, static_cast<int>(h), static_cast<int>(w)};
  j.channels = static_cast<int>(c);
  j.out = reinterpret_cast<std::uint8_t*>(out.data);
  j.row_stride = static_cast<std::size_t>(row_stride);
  return j;
}

// What jpeg_cpu_decode returns.
struct JpegResult {
  int image_height = 0, image_width = 0;
  int rows_decoded = 0, columns_decoded = 0;
  py::object warning;  // libjpeg-turbo's first warning, or None
};

// A pooled output block (core/host_pool.hpp), given back when numpy frees the array.
struct PooledBlock {
  gdsio::HostBlock block;
  bool huge;
};

// The (channels, height, width) uint8 numpy view of new (height, width,
// channels) memory (torchvision's CPU decode layout), never zeroed: numpy's
// allocation (malloc) below `pooled_min` bytes, a block of the host pool from
// there on (faulted-in pages reused; 2 MiB pages from `huge_min` bytes when not 0).
py::array new_output(int height, int width, int channels, std::size_t pooled_min, std::size_t huge_min) {
  const std::size_t bytes = (std::size_t)height * (std::size_t)width * (std::size_t)channels;
  const std::vector<py::ssize_t> shape{channels, height, width};
  const std::vector<py::ssize_t> strides{1, (py::ssize_t)width * channels, channels};
  if (bytes < pooled_min) return py::array_t<std::uint8_t>(shape, strides);  // numpy allocates, strides as given
  const bool huge = huge_min > 0 && bytes >= huge_min;
  gdsio::HostBlock b;
  {
    py::gil_scoped_release nogil;  // a fresh mapping may take a while
    b = gdsio::host_acquire(bytes, huge);
  }
  py::capsule owner(new PooledBlock{b, huge}, [](void* p) {
    auto* o = static_cast<PooledBlock*>(p);
    gdsio::host_release(o->block.data, o->block.bytes, o->huge);
    delete o;
  });
  return py::array_t<std::uint8_t>(shape, strides, static_cast<std::uint8_t*>(b.data), owner);
}

}  // namespace

GDSIO_EXPORT(jpeg_cpu) {
  using namespace gdsio::image;
  m.def("jpeg_cpu_available", &jpeg::available, "Whether this build links libjpeg-turbo (the CPU crop decode).");
  m.def("jpeg_cpu_version", &jpeg::version, "libjpeg-turbo's version in this build, or why it is absent.");
  gdsio::bindings::result_struct<JpegResult>(
      m, "JpegResult", "What jpeg_cpu_decode did: the image's size, the rows and columns decoded, the first warning.",
      std::pair{"image_height", &JpegResult::image_height}, std::pair{"image_width", &JpegResult::image_width},
      std::pair{"rows_decoded", &JpegResult::rows_decoded},
      std::pair{"columns_decoded", &JpegResult::columns_decoded}, std::pair{"warning", &JpegResult::warning});
  m.def(
      "jpeg_cpu_decode",
      [](py::handle data, int top, int left, py::handle out, bool strict) {
        std::vector<Array> keep;
        keep.reserve(2);
        const jpeg::Job j = job_of(data, top, left, out, "", keep);
        jpeg::Result r;
        {
          py::gil_scoped_release nogil;
          r = jpeg::decode(j.data, j.size, j.box, j.channels, j.out, j.row_stride, strict);
        }
        JpegResult res;
        res.image_height = r.image_height;
        res.image_width = r.image_width;
        res.rows_decoded = r.rows_decoded;
        res.columns_decoded = r.columns_decoded;
        res.warning = r.warned ? py::object(py::str(r.warning)) : py::object(py::none());
        return res;
      },
      py::arg("data"), py::arg("top"), py::arg("left"), py::arg("out"), py::arg("strict") = true,
      "Decodes the box of the JPEG in `data` (a dense uint8 array) whose top-left corner is (top, left) into\n"
      "`out`, a (height, width, channels) uint8 array (channels 3: RGB, 1: gray; channels adjacent, pixels\n"
      "`channels` apart, rows any distance apart) that gives the box's size. ValueError for data libjpeg-turbo\n"
      "refuses, or warns about when strict; returns the image's size, the rows and columns decoded, and the\n"
      "first warning.");
  m.def(
      "jpeg_cpu_decode_many",
      [](const py::sequence& jobs, std::size_t threads, bool strict) {
        const std::size_t n = jobs.size();
        std::vector<Array> keep;  // the views, until the decode returns
        keep.reserve(2 * n);
        std::vector<jpeg::Job> js;
        js.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::string prefix = "jobs[" + std::to_string(i) + "].";
          const py::object item = jobs[i];
          if (!py::isinstance<py::tuple>(item) || PyTuple_GET_SIZE(item.ptr()) != 6)
            throw py::type_error("jobs[" + std::to_string(i) +
                                 "]: expected a (data, top, left, out, image height, image width) tuple");
          PyObject* const* f = &PyTuple_GET_ITEM(item.ptr(), 0);
          jpeg::Job j = job_of(f[0], py::cast<int>(f[1]), py::cast<int>(f[2]), f[3], prefix, keep);
          j.expect_height = py::cast<int>(f[4]);
          j.expect_width = py::cast<int>(f[5]);
          js.push_back(j);
        }
        py::gil_scoped_release nogil;
        return jpeg::decode_many(js, strict, threads);
      },
      py::arg("jobs"), py::kw_only(), py::arg("threads"), py::arg("strict") = true,
      "jpeg_cpu_decode of every job (data, top, left, out, image height, image width) over the engine's\n"
      "threads, the GIL released once; per job '' or the ValueError message it raised (an image whose size is\n"
      "not the given one included; 0, 0: not checked).");
  m.def(
      "jpeg_cpu_decode_image",
      [](py::handle data, bool rgb, std::int64_t max_pixels, std::size_t max_header_bytes, std::size_t pooled_min,
         std::size_t huge_min) -> py::object {
        // None for anything but what the batch steps would decode here: the caller takes them then,
        // and they say why. Only a non-array raises (TypeError, from the view).
        const Array d = gdsio::bindings::view(data, "data");
        if (d.device != -1 || d.dtype != gdsio::bindings::kUInt8 || d.ndim() != 1 || !d.dense()) return py::none();
        const auto* p = reinterpret_cast<const std::uint8_t*>(d.data);
        const auto n = static_cast<std::size_t>(d.numel());
        if (!jpeg::markers_pass(p, n, max_header_bytes) || !jpeg::ends_with_eoi(p, n)) return py::none();
        jpeg::WholeImage img;
        jpeg::Header h;
        try {
          h = img.header(p, n);  // the GIL held: the markers up to the first scan
        } catch (const std::invalid_argument&) {
          return py::none();
        }
        if (!h.taken || (std::int64_t)h.height * h.width > max_pixels) return py::none();
        const int c = h.components == 1 && !rgb ? 1 : 3;
        py::array out = new_output(h.height, h.width, c, pooled_min, huge_min);
        auto* const pixels = static_cast<std::uint8_t*>(out.mutable_data());
        bool ok = true;
        {
          py::gil_scoped_release nogil;
          try {
            img.pixels(c, pixels, (std::size_t)h.width * c);
          } catch (const std::invalid_argument&) {
            ok = false;  // refused or warned: the batch steps hand it on and say why
          }
        }
        return ok ? py::object(std::move(out)) : py::object(py::none());
      },
      py::arg("data"), py::arg("rgb"), py::arg("max_pixels"), py::arg("max_header_bytes"), py::arg("pooled_min"),
      py::arg("huge_min"),
      "One whole JPEG in `data` (a 1-D uint8 host array) decoded by libjpeg-turbo, header and output made here:\n"
      "a (C, H, W) uint8 numpy view of new (H, W, C) memory (C 1 for a gray JPEG unless `rgb`, else 3 RGB),\n"
      "from the host pool from `pooled_min` bytes on (2 MiB pages from `huge_min`, 0: never). None for\n"
      "anything the libjpeg-turbo paths leave to the batch steps: another dtype, device or layout, markers\n"
      "gdsio's header parser refuses, a header past `max_header_bytes`, no EOI in the last 32 bytes, a header\n"
      "jpeg_cpu.header_refusal refuses, more than `max_pixels` pixels, or data libjpeg-turbo refuses or warns about.");
}
