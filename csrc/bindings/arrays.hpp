// The arrays a binding is handed: one validated view per argument.
//
// Python hands gdsio._core array objects (torch tensors, numpy arrays, CuPy
// arrays, memoryviews), never addresses. Each argument is viewed once, here,
// through the protocol it offers (DLPack's __dlpack__ first, then
// __cuda_array_interface__, then the buffer protocol): where its first element
// is, its shape and strides in elements, its dtype, the device that holds it,
// whether it may be written. The binding then states what it needs (this
// device, this dtype, this shape, dense rows, n bytes) and a mismatch raises a
// ValueError that names the argument, before any byte is read or written.
// Nothing here links libtorch.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace gdsio::bindings {

// A DLPack type code (DLDataTypeCode) and width: the element types gdsio's
// kernels take.
struct DType {
  std::uint8_t code = 1;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  std::uint8_t bits = 8;
  bool operator==(const DType& o) const { return code == o.code && bits == o.bits; }
  bool operator!=(const DType& o) const { return !(*this == o); }
  std::size_t itemsize() const { return (bits + 7u) / 8u; }
  std::string name() const;  // torch's spelling: "uint8", "float32", "bfloat16", ...
};

inline constexpr DType kUInt8{1, 8};
inline constexpr DType kUInt16{1, 16};
inline constexpr DType kInt32{0, 32};
inline constexpr DType kFloat16{2, 16};
inline constexpr DType kFloat32{2, 32};
inline constexpr DType kBFloat16{4, 16};

class Array {
 public:
  std::string name;                  // the argument as messages name it: "out", "images[3]"
  std::uintptr_t data = 0;           // the first element
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements, never negative
  DType dtype;
  int device = -1;                   // -1: host memory (pinned or not); >= 0: a CUDA device
  bool readonly = false;
  const char* protocol = "";          // how it was viewed: "torch", "dlpack", "cuda_array_interface", "buffer"
  pybind11::object owner;            // what keeps the memory viewed while the call runs

  int ndim() const { return static_cast<int>(shape.size()); }
  std::int64_t size(int dim) const;  // negative dims count from the end
  std::int64_t stride(int dim) const;
  std::int64_t numel() const;
  // Bytes from the first element to just past the last one (0 when empty).
  std::uint64_t extent_bytes() const;
  bool dense() const;  // C-contiguous
  std::string where() const;  // "cpu", "cuda:0"

  // What the binding needs; each raises ValueError naming the argument and
  // returns *this, so that checks chain: view(out, "out").on(dev).of(kUInt8).dense().
  const Array& on(int device) const;
  const Array& writable() const;
  const Array& of(DType t) const;
  const Array& dims(int n) const;
  const Array& shaped(std::initializer_list<std::int64_t> want) const;  // -1: any size
  const Array& shaped(const std::vector<std::int64_t>& want) const;
  const Array& is_dense() const;
  const Array& unit_stride(int dim) const;  // elements along `dim` adjacent
  const Array& holds(std::uint64_t bytes) const;  // a dense array of at least `bytes`

  // The first element of the sub-array at index i of dimension 0.
  Array row(std::int64_t i, std::string row_name) const;
};

// Views one array object; TypeError when it offers none of the protocols,
// ValueError when its view is one gdsio cannot use (negative strides,
// vector lanes, an unknown device type).
Array view(pybind11::handle obj, std::string name);

// A batch of arrays of `item_dims` dimensions each: a sequence of arrays, or
// one array of item_dims + 1 dimensions whose first dimension is the batch.
std::vector<Array> view_batch(pybind11::handle obj, const std::string& name, int item_dims);

// The device every array is on (all must agree); `fallback` for none.
int common_device(const std::vector<const Array*>& arrays, int fallback);

}  // namespace gdsio::bindings
