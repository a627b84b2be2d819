// gdsio._core.tf_color*: the colour ops (brightness, contrast, saturation,
// hue) over a batch; gdsio/transforms.py and gdsio.data's ColorJitter are
// the public faces. Pointers, strides, device indices and streams cross as
// ints; device < 0 runs the CPU twin on `threads` threads.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace py = pybind11;
using namespace gdsio;
using namespace gdsio::image;

namespace {

using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
using I32 = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

PixelType color_dtype(const std::string& s) {
  if (s == "uint8") return PixelType::kU8;
  if (s == "float32") return PixelType::kF32;
  if (s == "float16") return PixelType::kF16;
  if (s == "bfloat16") return PixelType::kBF16;
  throw ValueError("dtype: the colour ops take uint8, float32, float16 or bfloat16, not '" + s + "'");
}

// images: (N, 5) (data, channel_stride, row_stride, height, width); outs: (N,)
// contiguous outputs; ops: (N, 4) ColorOp codes; factors: (N, 4).
std::vector<ColorImage> to_color_images(const I64& images, const I64& outs, const I32& ops, const F64& factors) {
  GDSIO_EXPECT(images.ndim() == 2 && images.shape(1) == 5, ValueError,
               "images: an (N, 5) table of (data, channel_stride, row_stride, height, width) expected");
  const std::int64_t n = images.shape(0);
  GDSIO_EXPECT(outs.ndim() == 1 && outs.shape(0) == n, ValueError, "outs: one output pointer per image expected");
  GDSIO_EXPECT(ops.ndim() == 2 && ops.shape(0) == n && ops.shape(1) == kMaxColorOps, ValueError,
               "ops: an (N, 4) table of colour op codes expected");
  GDSIO_EXPECT(factors.ndim() == 2 && factors.shape(0) == n && factors.shape(1) == kMaxColorOps, ValueError,
               "factors: an (N, 4) table of factors expected");
  std::vector<ColorImage> v((std::size_t)n);
  const std::int64_t* im = images.data();
  for (std::int64_t i = 0; i < n; ++i, im += 5) {
    GDSIO_EXPECT(im[3] >= 0 && im[3] <= INT32_MAX && im[4] >= 0 && im[4] <= INT32_MAX, ValueError, "images[", i,
                 "]: size ", im[3], "x", im[4], " out of range");
    ColorImage& c = v[(std::size_t)i];
    c.src = (std::uintptr_t)im[0];
    c.channel_stride = im[1];
    c.row_stride = im[2];
    c.height = (std::int32_t)im[3];
    c.width = (std::int32_t)im[4];
    c.dst = (std::uintptr_t)outs.data()[i];
    for (int k = 0; k < kMaxColorOps; ++k) {
      const std::int32_t op = ops.data()[i * kMaxColorOps + k];
      GDSIO_EXPECT(op >= 0 && op <= (int)ColorOp::kHue, ValueError, "ops[", i, "]: unknown colour op ", op);
      const double f = factors.data()[i * kMaxColorOps + k];
      c.ops[k] = (ColorOp)op;
      c.factor[k] = (float)f;
      c.one_minus[k] = (float)(1.0 - f);  // torchvision's alpha=(1.0 - ratio), in double
    }
  }
  return v;
}

}  // namespace

GDSIO_EXPORT(color) {
  m.attr("tf_color_ops") = py::dict(py::arg("none") = (int)ColorOp::kNone,
                                    py::arg("brightness") = (int)ColorOp::kBrightness,
                                    py::arg("contrast") = (int)ColorOp::kContrast,
                                    py::arg("saturation") = (int)ColorOp::kSaturation,
                                    py::arg("hue") = (int)ColorOp::kHue);

  m.def(
      "tf_color_workspace_bytes",
      [](const I64& images, const I64& outs, const I32& ops, const F64& factors, const std::string& dtype,
         int channels) {
        std::vector<ColorImage> v = to_color_images(images, outs, ops, factors);
        return plan_color(v, ColorSpec{color_dtype(dtype), channels});
      },
      py::arg("images"), py::arg("outs"), py::arg("ops"), py::arg("factors"), py::kw_only(), py::arg("dtype"),
      py::arg("channels"), "Bytes of device workspace tf_color needs (the contrast sums and means).");

  m.def(
      "tf_color",
      [](const I64& images, const I64& outs, const I32& ops, const F64& factors, const std::string& dtype,
         int channels, int device, std::uintptr_t stream, std::uintptr_t workspace, std::size_t workspace_bytes,
         std::size_t threads) {
        std::vector<ColorImage> v = to_color_images(images, outs, ops, factors);
        const ColorSpec spec{color_dtype(dtype), channels};
        py::gil_scoped_release nogil;
        if (device < 0)
          color_cpu(std::move(v), spec, threads);
        else
          color_cuda(std::move(v), spec, workspace, workspace_bytes, device, stream);
      },
      py::arg("images"), py::arg("outs"), py::arg("ops"), py::arg("factors"), py::kw_only(), py::arg("dtype"),
      py::arg("channels"), py::arg("device") = -1, py::arg("stream") = 0, py::arg("workspace") = 0,
      py::arg("workspace_bytes") = 0, py::arg("threads") = 1,
      "Runs each image's colour ops (codes tf_color_ops, up to 4, in order) into its contiguous output; "
      "device < 0: CPU.");
}
