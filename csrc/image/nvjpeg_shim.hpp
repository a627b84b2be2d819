// The only code that touches libnvjpeg. It is loaded with dlopen on first use
// (never linked; the path comes from Python's find_nvidia_lib, else
// libnvjpeg.so.13, then .so.12). Handles are created once per (device,
// backend); decoder states come from a pool, so each call (each thread) has a
// state of its own. Every failure is kept as a sentence that says why.
//
// In a build without CUDA everything here exists: loading reports "built
// without CUDA" and decoding throws gdsio::Unavailable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace gdsio::image {

// nvJPEG itself failed on a batch (execution failed, internal error, a state it
// could not make): the images' failure, which the caller may retry image by
// image or on another backend. Becomes gdsio._core.NvjpegError (a RuntimeError);
// a CUDA error around the decode stays a CudaError.
class NvjpegError : public CudaError {
 public:
  using CudaError::CudaError;
};

struct NvjpegStatus {
  bool loaded = false;
  std::string library;  // the path it was loaded from
  int major = 0, minor = 0, patch = 0;                     // nvjpegGetProperty
  int cudart_major = 0, cudart_minor = 0, cudart_patch = 0;  // nvjpegGetCudartProperty (0: unknown)
  std::string reason;  // why it is not loaded
};

// Loads libnvjpeg from `path` (empty: libnvjpeg.so.13, then libnvjpeg.so.12
// from the loader's search path). The first successful load wins; never throws.
NvjpegStatus nvjpeg_load(const std::string& path);
NvjpegStatus nvjpeg_status();

// The three ways gdsio decodes with nvJPEG, best first.
enum class JpegBackend : int {
  kHardwareDevice = 0,   // NVJPEG_BACKEND_HARDWARE_DEVICE: the JPEG engines, bitstream in device memory
  kGpuHybridDevice = 1,  // NVJPEG_BACKEND_GPU_HYBRID_DEVICE: CUDA Huffman decode, bitstream in device memory
  kHost = 2,             // NVJPEG_BACKEND_DEFAULT: bitstream in host memory
};
constexpr int kJpegBackends = 3;
const char* jpeg_backend_name(JpegBackend b);  // "nvjpeg-hardware-device", ...

struct NvjpegBackendInfo {
  bool usable = false;
  std::string reason;             // why not usable
  // nvjpegCreateEx took NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION (nvJPEG >=
  // 12.1); whether the backend then upsamples that way is measured in Python
  // (gdsio.image.jpeg), since a backend may accept the flag and ignore it.
  bool fancy_upsampling_flag = false;
};

struct NvjpegDeviceInfo {
  NvjpegBackendInfo backends[kJpegBackends];
  unsigned hardware_engines = 0;  // from nvjpegGetHardwareDecoderInfo, 0 when unknown
  unsigned hardware_cores = 0;
};

// Creates the handles of `device` (once) and says which backends work there.
// Never throws for "not available"; throws Unavailable when built without CUDA.
NvjpegDeviceInfo nvjpeg_probe(int device);

enum class JpegOutput : int {
  kY = 2,    // NVJPEG_OUTPUT_Y into (1, H, W)
  kRGB = 3,  // NVJPEG_OUTPUT_RGB, planar, into (3, H, W)
};

struct JpegJob {
  const std::uint8_t* data = nullptr;  // device memory for the *_DEVICE backends, host memory for kHost
  std::size_t length = 0;
  std::uint8_t* dst = nullptr;  // device memory: contiguous (1 or 3, height, width)
  std::int64_t height = 0;
  std::int64_t width = 0;
};

// Asks nvJPEG whether its hardware decoder takes each image, from the image's
// header bytes on the host (nvjpegJpegStreamParseHeader, then
// nvjpegDecodeBatchedSupported). Per image: 1 yes, 0 no, -1 unknown (the
// check could not run; the caller then goes by its own header rules).
std::vector<int> nvjpeg_hardware_supported(int device, const std::vector<const std::uint8_t*>& headers,
                                           const std::vector<std::size_t>& lengths);

// One nvjpegDecodeBatched call over `jobs` on `stream` (a cudaStream_t as an
// int). A bitstream the backend rejects makes the whole batch fail with
// gdsio::ValueError ("nvJPEG rejected ...", the status named): the caller
// retries image by image. Other nvJPEG failures (allocation, execution)
// throw gdsio::CudaError; a backend that cannot run throws Unavailable.
// Before anything is decoded, each job's image size as nvJPEG reads it
// (nvjpegGetImageInfo, component 0; a device bitstream's header is copied to
// the host for it) must be the job's width x height, else ValueError
// ("jobs[i]: the bitstream is WxH ..."): nvJPEG writes the size it parses.
void nvjpeg_decode_batch(int device, JpegBackend backend, JpegOutput output, const std::vector<JpegJob>& jobs,
                         std::uintptr_t stream);

// Destroys every idle decoder state and the handles (atexit). Returns false,
// destroying nothing, while a decode is in flight in another thread.
bool nvjpeg_release();

}  // namespace gdsio::image
