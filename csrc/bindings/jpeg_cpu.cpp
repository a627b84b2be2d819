// libjpeg-turbo on the CPU (csrc/image/jpeg_turbo.hpp): pointers and sizes
// cross as ints, the GIL is released while decoding. gdsio/image/jpeg_cpu.py
// parses the header, allocates the output with torch and calls this.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/jpeg_turbo.hpp"

namespace py = pybind11;

GDSIO_EXPORT(jpeg_cpu) {
  using namespace gdsio::image;
  m.def("jpeg_cpu_available", &jpeg::available, "Whether this build links libjpeg-turbo (the CPU crop decode).");
  m.def("jpeg_cpu_version", &jpeg::version, "libjpeg-turbo's version in this build, or why it is absent.");
  m.def(
      "jpeg_cpu_decode",
      [](std::uintptr_t data, std::uint64_t size, int top, int left, int height, int width, int channels,
         std::uintptr_t out, std::uint64_t out_bytes, std::uint64_t row_stride, bool strict) {
        if (height <= 0 || width <= 0) throw gdsio::ValueError("the box must have a positive height and width");
        const std::uint64_t need = (std::uint64_t)(height - 1) * row_stride + (std::uint64_t)width * channels;
        if (row_stride < (std::uint64_t)width * channels || need > out_bytes)
          throw gdsio::ValueError("the output holds " + std::to_string(out_bytes) + " bytes; the box needs " +
                                  std::to_string(need));
        jpeg::Result r;
        {
          py::gil_scoped_release nogil;
          r = jpeg::decode(reinterpret_cast<const std::uint8_t*>(data), size, {top, left, height, width}, channels,
                           reinterpret_cast<std::uint8_t*>(out), row_stride, strict);
        }
        py::dict d;
        d["image_height"] = r.image_height;
        d["image_width"] = r.image_width;
        d["rows_decoded"] = r.rows_decoded;
        d["columns_decoded"] = r.columns_decoded;
        d["warning"] = r.warned ? py::object(py::str(r.warning)) : py::object(py::none());
        return d;
      },
      py::arg("data"), py::arg("size"), py::arg("top"), py::arg("left"), py::arg("height"), py::arg("width"),
      py::arg("channels"), py::arg("out"), py::arg("out_bytes"), py::arg("row_stride"), py::arg("strict") = true,
      "Decodes the box (top, left, height, width) of the JPEG at `data` into `out` ((height, width, channels)\n"
      "uint8 rows `row_stride` bytes apart). ValueError for data libjpeg-turbo refuses, or warns about when\n"
      "strict; returns the image's size, the rows and columns decoded, and the first warning.");
  m.def(
      "jpeg_cpu_decode_many",
      [](const std::vector<std::vector<std::uint64_t>>& jobs, std::size_t threads, bool strict) {
        std::vector<jpeg::Job> js;
        js.reserve(jobs.size());
        for (const auto& r : jobs) {
          if (r.size() != 12)
            throw gdsio::ValueError("a job is (data, size, top, left, height, width, channels, out, out_bytes, "
                                    "row_stride, image height, image width)");
          jpeg::Job j;
          j.data = reinterpret_cast<const std::uint8_t*>(r[0]);
          j.size = r[1];
          j.box = {(int)r[2], (int)r[3], (int)r[4], (int)r[5]};
          j.channels = (int)r[6];
          j.out = reinterpret_cast<std::uint8_t*>(r[7]);
          j.row_stride = r[9];
          j.expect_height = (int)r[10];
          j.expect_width = (int)r[11];
          if (j.box.height <= 0 || j.box.width <= 0 || j.row_stride < (std::uint64_t)j.box.width * j.channels ||
              (std::uint64_t)(j.box.height - 1) * j.row_stride + (std::uint64_t)j.box.width * j.channels > r[8])
            throw gdsio::ValueError("a job's output is too small for its box");
          js.push_back(j);
        }
        py::gil_scoped_release nogil;
        return jpeg::decode_many(js, strict, threads);
      },
      py::arg("jobs"), py::kw_only(), py::arg("threads"), py::arg("strict") = true,
      "jpeg_cpu_decode of every job over the engine's threads, the GIL released once; per job '' or the\n"
      "ValueError message it raised.");
}
