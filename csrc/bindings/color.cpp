// gdsio._core.tf_color*: the colour ops (brightness, contrast, saturation,
// hue) over a batch; gdsio/transforms.py and gdsio.data's ColorJitter are
// the public faces. Images, outputs and the workspace cross as arrays
// (bindings/arrays.hpp), viewed and checked here before any byte moves; the
// device is the arrays' (cpu: the CPU twin on `threads` threads; cuda:n: the
// kernels on `stream`).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings/arrays.hpp"
#include "bindings/image_arrays.hpp"
#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace py = pybind11;
using namespace gdsio;
using namespace gdsio::image;
using bindings::Array;

namespace {

using I32 = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A batch of the colour ops: images, a sequence of (C, H, W) arrays or one
// (N, C, H, W) array of one dtype, rows of adjacent pixels (channel planes);
// outs, one contiguous array of each image's shape, dtype and device (a
// sequence or one (N, C, H, W) array); ops (N, 4) ColorOp codes; factors (N, 4).
struct ColorBatch {
  std::vector<Array> arrays;  // the views: they keep the memory alive until the call ends
  std::vector<ColorImage> images;
  ColorSpec spec;
  int device = -1;
};

ColorBatch color_batch(py::handle images, py::handle outs, const I32& ops, const F64& factors) {
  ColorBatch b;
  std::vector<Array> in = bindings::view_batch(images, "images", 3);
  const auto n = static_cast<std::int64_t>(in.size());
  GDSIO_EXPECT(n > 0, ValueError, "images: the batch is empty");
  std::vector<Array> out;
  if (!outs.is_none()) {
    out = bindings::view_batch(outs, "outs", 3);
    GDSIO_EXPECT(static_cast<std::int64_t>(out.size()) == n, ValueError, "outs: ", out.size(), " arrays for ", n,
                 " images");
  }
  GDSIO_EXPECT(ops.ndim() == 2 && ops.shape(0) == n && ops.shape(1) == kMaxColorOps, ValueError,
               "ops: an (N, 4) table of colour op codes expected");
  GDSIO_EXPECT(factors.ndim() == 2 && factors.shape(0) == n && factors.shape(1) == kMaxColorOps, ValueError,
               "factors: an (N, 4) table of factors expected");
  const Array& first = in[0];
  b.spec = ColorSpec{bindings::pixel_type_of(first, "the colour ops take"),
                     static_cast<std::int32_t>(std::min<std::int64_t>(first.size(0), INT32_MAX))};
  b.images.resize(static_cast<std::size_t>(n));
  std::vector<const Array*> all;
  for (std::int64_t i = 0; i < n; ++i) {
    const Array& a = in[static_cast<std::size_t>(i)];
    a.of(first.dtype).shaped({first.shape[0], -1, -1}).unit_stride(2);
    GDSIO_EXPECT(a.shape[1] <= INT32_MAX && a.shape[2] <= INT32_MAX, ValueError, a.name, ": size ", a.shape[1], "x",
                 a.shape[2], " out of range");
    ColorImage& c = b.images[static_cast<std::size_t>(i)];
    c.src = a.data;
    c.channel_stride = a.strides[0];
    c.row_stride = a.strides[1];
    c.height = static_cast<std::int32_t>(a.shape[1]);
    c.width = static_cast<std::int32_t>(a.shape[2]);
    // Planning only (no outs): the plan checks that an output is there.
    c.dst = out.empty() ? a.data : out[static_cast<std::size_t>(i)].data;
    if (!out.empty()) out[static_cast<std::size_t>(i)].writable().of(a.dtype).shaped(a.shape).is_dense();
    all.push_back(&a);
    for (int k = 0; k < kMaxColorOps; ++k) {
      const std::int32_t op = ops.data()[i * kMaxColorOps + k];
      GDSIO_EXPECT(op >= 0 && op <= (int)ColorOp::kHue, ValueError, "ops[", i, "]: unknown colour op ", op);
      const double f = factors.data()[i * kMaxColorOps + k];
      c.ops[k] = (ColorOp)op;
      c.factor[k] = (float)f;
      c.one_minus[k] = (float)(1.0 - f);  // torchvision's alpha=(1.0 - ratio), in double
    }
  }
  for (const Array& o : out) all.push_back(&o);
  b.device = bindings::common_device(all, -1);
  b.arrays = std::move(in);
  for (Array& o : out) b.arrays.push_back(std::move(o));
  return b;
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
      [](py::handle images, const I32& ops, const F64& factors) {
        ColorBatch b = color_batch(images, py::none(), ops, factors);
        return plan_color(b.images, b.spec);
      },
      py::arg("images"), py::arg("ops"), py::arg("factors"),
      "Bytes of device workspace tf_color needs for these images and ops (the contrast sums and means).");

  m.def(
      "tf_color",
      [](py::handle images, py::handle outs, const I32& ops, const F64& factors, std::uintptr_t stream,
         py::handle workspace, std::size_t threads) {
        GDSIO_EXPECT(!outs.is_none(), ValueError, "outs: one output array per image expected, got None");
        ColorBatch b = color_batch(images, outs, ops, factors);
        if (b.device < 0) {
          py::gil_scoped_release nogil;
          color_cpu(std::move(b.images), b.spec, threads);
          return;
        }
        const Array ws = bindings::workspace_for(workspace, plan_color(b.images, b.spec), b.device);
        py::gil_scoped_release nogil;
        color_cuda(std::move(b.images), b.spec, ws.data, static_cast<std::size_t>(ws.numel()) * ws.dtype.itemsize(),
                   b.device, stream);
      },
      py::arg("images"), py::arg("outs"), py::arg("ops"), py::arg("factors"), py::kw_only(), py::arg("stream") = 0,
      py::arg("workspace") = py::none(), py::arg("threads") = 1,
      "Runs each image's colour ops (codes tf_color_ops, up to 4, in order) into its contiguous output of the "
      "same shape, dtype and device; images and outs are sequences of (C, H, W) arrays or (N, C, H, W) arrays "
      "(CUDA: `workspace`, a byte buffer or a callable given the bytes that returns one).");
}
