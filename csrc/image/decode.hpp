// Decoding of uncompressed images (PNM, NPY, raw records) into (C,H,W)
// tensors, on the CPU or the GPU. No CUDA syntax here: the bindings and the
// CPU twin include this header; the kernels live in decode_cuda.cu.
//
// A PixelJob says where one image's samples are (pointer, byte count, strides
// in samples), how each sample is stored (Sample), what it becomes (OutType)
// and how the source channels map to the output channels (Convert). The
// output is always a contiguous (dst_channels, height, width) array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gdsio::image {

// How one source sample is stored. 16-bit and float samples may be unaligned.
enum class Sample : std::int32_t {
  kU8 = 0,
  kU16LE = 1,  // NPY '<u2', raw little-endian
  kU16BE = 2,  // PNM with maxval > 255, NPY '>u2'
  kF32LE = 3,
  kF32BE = 4,
};

// The output element type: uint8 for 8-bit samples, uint16 for 16-bit ones,
// float32 for float ones (no implicit rescaling between them).
enum class OutType : std::int32_t { kU8 = 0, kU16 = 1, kF32 = 2 };

enum class Convert : std::int32_t {
  kCopy = 0,       // out[c] = src[c], c < dst_channels <= src_channels (drops alpha)
  kReplicate = 1,  // out[c] = src[0] for every c (gray -> RGB)
  kLuma = 2,       // out[0] = ITU-R 601-2 luma of src[0..2] (RGB -> gray), as Pillow's convert("L")
};

struct PixelJob {
  const std::uint8_t* src = nullptr;  // the first sample (c=0, y=0, x=0)
  std::uint64_t src_bytes = 0;        // bytes readable from src: every sample read is checked against it
  void* dst = nullptr;                // contiguous (dst_channels, height, width) of OutType
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t stride_c = 0;  // in samples, not bytes
  std::int64_t stride_y = 0;
  std::int64_t stride_x = 0;
  std::int32_t src_channels = 0;
  std::int32_t dst_channels = 0;
  Sample sample = Sample::kU8;
  OutType out = OutType::kU8;
  Convert convert = Convert::kCopy;
  // PNM only: samples run 0..maxval and are rescaled to the full range of
  // `out` (255 or 65535) by Pillow's rule (see pixel_formats.hpp). 0: no rescale.
  std::uint32_t maxval = 0;
};

std::size_t sample_bytes(Sample s);
std::size_t out_bytes(OutType t);

// Throws gdsio::ValueError("pixel job <index>: ...") unless the job is
// consistent and reads only inside [src, src + src_bytes).
void validate_pixel_job(const PixelJob& j, std::size_t index);
// The same, the message starting with `label` (the bindings: "jobs[3]").
void validate_pixel_job(const PixelJob& j, const std::string& label);

// The CPU twin: row bands of every job spread over `threads` workers.
void decode_pixels_cpu(const std::vector<PixelJob>& jobs, std::size_t threads);

// The GPU path: src and dst are device memory of `device`; the work is queued
// on `stream` (a cudaStream_t as an int, 0 = legacy default stream) in as few
// launches as possible (kJobsPerLaunch jobs per launch). Returns the number
// of kernel launches. Throws gdsio::Unavailable in a build without CUDA and
// gdsio::CudaError when a launch fails.
std::size_t decode_pixels_cuda(const std::vector<PixelJob>& jobs, int device, std::uintptr_t stream);

// Jobs travel to the kernel by value as one kernel parameter (no device
// allocation, no copy): 128 jobs take about 12 KiB of the 32 KiB allowed.
constexpr std::size_t kJobsPerLaunch = 128;

}  // namespace gdsio::image
