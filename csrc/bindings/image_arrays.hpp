// What the image bindings (transforms.cpp, color.cpp) share about their
// array arguments: the pixel type of an array, and a CUDA launch's workspace.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings/arrays.hpp"
#include "core/error.hpp"
#include "image/transforms.hpp"

namespace gdsio::bindings {

// The kernels' pixel type of an array: uint8, float32, float16 or bfloat16.
inline image::PixelType pixel_type_of(const Array& a, const char* op) {
  if (a.dtype == kUInt8) return image::PixelType::kU8;
  if (a.dtype == kFloat32) return image::PixelType::kF32;
  if (a.dtype == kFloat16) return image::PixelType::kF16;
  if (a.dtype == kBFloat16) return image::PixelType::kBF16;
  throw ValueError(a.name + ": has dtype " + a.dtype.name() + "; " + op + " uint8, float32, float16 or bfloat16");
}

// A CUDA launch's workspace: a byte buffer on `device` holding `bytes`, or a
// callable that is given `bytes` and returns one (the caller's allocator: it
// then needs no second pass over the batch to learn the size). Called with
// the GIL held; the returned view keeps the buffer alive until the call ends.
inline Array workspace_for(pybind11::handle ws, std::uint64_t bytes, int device) {
  if (ws.is_none())
    throw ValueError("workspace: a CUDA launch needs a device workspace of " + std::to_string(bytes) +
                     " bytes (an array, or a callable given the bytes that returns one)");
  pybind11::object obj = PyCallable_Check(ws.ptr()) ? ws(bytes) : pybind11::reinterpret_borrow<pybind11::object>(ws);
  Array a = view(obj, "workspace");
  a.on(device).writable().holds(bytes);
  return a;
}

}  // namespace gdsio::bindings
