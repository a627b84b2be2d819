// Image transforms: resize (Pillow- or OpenCV-exact), the fused
// crop-flip-resize-normalize step, pad and the colour ops (brightness,
// contrast, saturation, hue); the standalone flips, to_dtype and normalize
// are torch's ops (gdsio/transforms). Each comes as a CPU function (gdsio's
// thread pool) and a CUDA launcher with the same arguments plus a device
// index and a stream; both share the arithmetic of resample.hpp, color.hpp
// and pad.hpp, so the CPU path is the GPU path's oracle. No CUDA syntax here.
//
// Images are uint8 (C, H, W) planes addressed by pointer and strides, so a
// crop is a pointer offset, and a batch is any list of them. Outputs are
// contiguous (N, C, out_h, out_w) tensors allocated by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "image/color.hpp"
#include "image/pad.hpp"
#include "image/resample.hpp"

namespace gdsio::image {

// One source image, or a crop of one.
struct ImageRef {
  std::uintptr_t data = 0;          // address of channel 0, top row, left column
  std::int64_t channel_stride = 0;  // elements (bytes) between channels
  std::int64_t row_stride = 0;      // elements between rows
  std::int32_t height = 0;          // of the crop
  std::int32_t width = 0;
  bool flip = false;                // mirror the output left-right
  std::int64_t pixel_stride = 1;    // elements between columns: 1 for planes, C for
                                    // interleaved (H, W, C) memory (CPU only)
};

struct ResizeSpec {
  Filter filter = Filter::kBilinear;
  Reference ref = Reference::kPillow;
  std::int32_t channels = 3;  // 1 to 4
  std::int32_t out_h = 0;
  std::int32_t out_w = 0;
  px::Epilogue epilogue{PixelType::kU8, false, false, {0, 0, 0, 0}, {1, 1, 1, 1}};
};

// Largest batch of one kernel launch (the image table travels as a kernel
// parameter); larger batches are split into several launches by the launcher.
constexpr std::size_t kMaxImagesPerLaunch = 512;

// Checks the request; throws gdsio::ValueError naming what is wrong (and the
// batch index).
void check_resize(const std::vector<ImageRef>& images, const ResizeSpec& spec);

// Bytes of device workspace (filter coefficients) resize_cuda needs.
std::size_t resize_workspace_bytes(const std::vector<ImageRef>& images, const ResizeSpec& spec);

// Every image's filter windows as the host computes them, laid out as the
// device workspace (the GPU tests compare the two bit for bit).
std::vector<std::int32_t> resize_windows(const std::vector<ImageRef>& images, const ResizeSpec& spec);

// out: contiguous (N, C, out_h, out_w) of spec.epilogue.out.
void resize_cpu(const std::vector<ImageRef>& images, const ResizeSpec& spec, std::uintptr_t out,
                std::size_t threads);
void resize_cuda(const std::vector<ImageRef>& images, const ResizeSpec& spec, std::uintptr_t out,
                 std::uintptr_t workspace, std::size_t workspace_bytes, int device, std::uintptr_t stream);

// pad (pad.hpp): checks the spec, throwing gdsio::ValueError naming the problem.
void check_pad(const PadSpec& spec);
void pad_cpu(std::uintptr_t in, std::uintptr_t out, const PadSpec& spec, std::size_t threads);
void pad_cuda(std::uintptr_t in, std::uintptr_t out, const PadSpec& spec, int device, std::uintptr_t stream);

// The colour ops (color.hpp) over a batch of images of one dtype and channel
// count (1 or 3), each with its own ops and factors, in one pass (two when an
// image has a contrast op: its mean first).
struct ColorSpec {
  PixelType type = PixelType::kU8;
  std::int32_t channels = 3;
};
constexpr std::size_t kMaxColorImagesPerLaunch = 256;
// Checks the batch and sets each image's bands; returns the bytes of device
// workspace color_cuda needs (the contrast sums and means).
std::size_t plan_color(std::vector<ColorImage>& images, const ColorSpec& spec);
void color_cpu(std::vector<ColorImage> images, const ColorSpec& spec, std::size_t threads);
void color_cuda(std::vector<ColorImage> images, const ColorSpec& spec, std::uintptr_t workspace,
                std::size_t workspace_bytes, int device, std::uintptr_t stream);

namespace detail {
// Per image: the coefficient layout shared by the CPU and the GPU paths.
struct ImagePlan {
  px::Axis h, v;
  std::int32_t ksize_h = 0, ksize_v = 0;
  std::int64_t offset = 0;  // in int32s, of this image's coefficients in the workspace
  std::int64_t ints = 0;    // horizontal then vertical axis
};
std::vector<ImagePlan> plan_resize(const std::vector<ImageRef>& images, const ResizeSpec& spec);
Arith arith_of(const ResizeSpec& spec);
}  // namespace detail

}  // namespace gdsio::image
