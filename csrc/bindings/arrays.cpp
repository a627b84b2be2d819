// One validated view per array argument (arrays.hpp).
#include "bindings/arrays.hpp"

#include <pybind11/stl.h>

#include <cstring>
#include <limits>

#include "bindings/registry.hpp"
#include "core/cuda_rt.hpp"
#include "core/error.hpp"

namespace py = pybind11;

namespace gdsio::bindings {

namespace {

// The DLPack C ABI (https://dmlc.github.io/dlpack/latest/c_api.html), the
// fields this file reads, in the layout the standard fixes: version 1.x
// capsules are "dltensor_versioned", older ones "dltensor".
namespace dl {
struct Device {
  std::int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed
  std::int32_t device_id;
};
struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact row-major
  std::uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
struct PackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct ManagedTensorVersioned {
  PackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned*);
  std::uint64_t flags;  // bit 0: read only
  Tensor dl_tensor;
};
constexpr std::uint64_t kReadOnly = 1;
constexpr int kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13;
}  // namespace dl

std::string type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

[[noreturn]] void bad(const Array& a, const std::string& what) { throw ValueError(a.name + ": " + what); }

std::string dims_text(const std::vector<std::int64_t>& v) {
  std::string s = "(";  // not an ostringstream: see detail::concat (core/error.hpp)
  for (std::size_t i = 0; i < v.size(); ++i) s += detail::concat(i ? ", " : "", v[i]);
  s += v.size() == 1 ? ",)" : ")";
  return s;
}

// Fills shape and strides, checks what no binding can use.
void take_layout(Array& a, int ndim, const std::int64_t* shape, const std::int64_t* strides, bool strides_in_bytes) {
  if (ndim < 0 || ndim > 16) bad(a, "has " + std::to_string(ndim) + " dimensions");
  a.shape.assign(shape, shape + ndim);
  a.strides.resize(static_cast<std::size_t>(ndim));
  std::int64_t compact = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (a.shape[d] < 0) bad(a, "has a negative size " + dims_text(a.shape));
    std::int64_t s = compact;
    if (strides) {
      s = strides[d];
      if (strides_in_bytes) {
        const auto item = static_cast<std::int64_t>(a.dtype.itemsize());
        if (s % item != 0) bad(a, "has a stride of " + std::to_string(s) + " bytes, not a whole number of elements");
        s /= item;
      }
    }
    if (s < 0 && a.shape[d] > 1) bad(a, "has a negative stride (a reversed view); pass a copy");
    a.strides[d] = a.shape[d] > 1 ? s : (s < 0 ? 0 : s);
    compact *= a.shape[d] ? a.shape[d] : 1;
  }
}

// torch's Tensor.__dlpack__ is Python around torch._C._to_dlpack_versioned:
// 1.9 us of its 2.5 us per view go to the wrapper's checks. For a plain
// torch.Tensor the same checks are made here (requires_grad, the conjugate
// bit) and the exporter is called directly; it is a private name of torch, so
// it is looked up once, and where a torch lacks it every tensor takes the public
// path. The wrapper also refuses a CUDA tensor of another device than the
// current one, which this path (like data_ptr before it) does not.
py::object torch_exporter(py::handle obj) {
  // Held for the process's life (never released: no decref after the interpreter ends).
  static PyObject* tensor_type = nullptr;
  static PyObject* exporter = nullptr;
  if (!tensor_type) {
    // Only once torch is imported (the caller's tensor says it is); until then, look again.
    py::object torch = py::reinterpret_steal<py::object>(PyImport_GetModule(py::str("torch").ptr()));
    if (!torch) {
      PyErr_Clear();
      return py::object();
    }
    tensor_type = py::object(torch.attr("Tensor")).release().ptr();
    py::object c = torch.attr("_C");
    if (py::hasattr(c, "_to_dlpack_versioned")) exporter = py::object(c.attr("_to_dlpack_versioned")).release().ptr();
  }
  if (!exporter || Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(tensor_type)) return py::object();
  if (obj.attr("requires_grad").cast<bool>() || obj.attr("is_conj")().cast<bool>()) return py::object();
  return py::reinterpret_borrow<py::object>(exporter);
}

bool view_dlpack(py::handle obj, Array& a, std::string* refused) {
  py::object cap;
  if (py::object fast = torch_exporter(obj)) {
    try {
      cap = fast(obj);
      a.protocol = "torch";
    } catch (py::error_already_set&) {
      cap = py::object();  // the public path says why
    }
  }
  if (!cap) {
    py::object fn = py::getattr(obj, "__dlpack__", py::none());
    if (fn.is_none()) return false;
    try {
      try {
        cap = fn(py::arg("max_version") = py::make_tuple(1, 0));
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        cap = fn();  // an exporter of DLPack < 1.0 (numpy < 2.1): no max_version
      }
    } catch (py::error_already_set& e) {
      // A tensor that requires grad, a read-only numpy array before DLPack 1.0:
      // another protocol may still view it.
      *refused = type_name(obj) + " could not be viewed through DLPack (" + std::string(py::str(e.value())) + ")";
      return false;
    }
    a.protocol = "dlpack";
  }
  const dl::Tensor* t = nullptr;
  if (PyCapsule_IsValid(cap.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap.ptr(), "dltensor_versioned"));
    if (m->version.major != 1) bad(a, "DLPack version " + std::to_string(m->version.major) + " is not 1");
    a.readonly = (m->flags & dl::kReadOnly) != 0;
    t = &m->dl_tensor;
  } else if (PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    t = &static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"))->dl_tensor;
  } else {
    bad(a, type_name(obj) + ".__dlpack__() did not return a DLPack capsule");
  }
  // The capsule stays unconsumed: its destructor (the exporter's) releases the
  // tensor when `owner` goes, after the call.
  a.owner = cap;
  if (t->dtype.lanes != 1) bad(a, "has vector elements (DLPack lanes " + std::to_string(t->dtype.lanes) + ")");
  a.dtype = DType{t->dtype.code, t->dtype.bits};
  switch (t->device.device_type) {
    case dl::kCPU:
    case dl::kCUDAHost: a.device = -1; break;
    case dl::kCUDA:
    case dl::kCUDAManaged: a.device = t->device.device_id; break;
    default: bad(a, "is on DLPack device type " + std::to_string(t->device.device_type) + ", not the host or CUDA");
  }
  a.data = reinterpret_cast<std::uintptr_t>(t->data) + t->byte_offset;
  take_layout(a, t->ndim, t->shape, t->strides, false);
  return true;
}

DType dtype_of_typestr(const Array& a, const std::string& s) {
  // numpy's array-interface typestr: byte order, kind, bytes ("<f4", "|u1").
  if (s.size() < 3 || s[0] == '>') bad(a, "has element type '" + s + "' (big-endian or unknown)");
  const int bytes = std::atoi(s.c_str() + 2);
  switch (s[1]) {
    case 'u': return DType{1, static_cast<std::uint8_t>(8 * bytes)};
    case 'i': return DType{0, static_cast<std::uint8_t>(8 * bytes)};
    case 'f': return DType{2, static_cast<std::uint8_t>(8 * bytes)};
    case 'b': return DType{6, 8};
    default: bad(a, "has element type '" + s + "', not an integer, float or bool");
  }
}

bool view_cuda_interface(py::handle obj, Array& a) {
  py::object cai = py::getattr(obj, "__cuda_array_interface__", py::none());
  if (cai.is_none()) return false;
  py::dict d = cai.cast<py::dict>();
  a.dtype = dtype_of_typestr(a, d["typestr"].cast<std::string>());
  py::tuple data = d["data"].cast<py::tuple>();
  a.data = data[0].cast<std::uintptr_t>();
  a.readonly = data[1].cast<bool>();
  const auto shape = d["shape"].cast<std::vector<std::int64_t>>();
  std::vector<std::int64_t> strides;
  if (d.contains("strides") && !d["strides"].is_none()) strides = d["strides"].cast<std::vector<std::int64_t>>();
  take_layout(a, static_cast<int>(shape.size()), shape.data(), strides.empty() ? nullptr : strides.data(), true);
  // The interface does not say which device; the runtime does.
  int dev = -1;
  const std::string kind = a.data ? cuda_pointer_kind(reinterpret_cast<const void*>(a.data), &dev) : "device";
  a.device = (kind == "device" || kind == "managed") ? dev : -1;
  a.owner = py::reinterpret_borrow<py::object>(obj);
  a.protocol = "cuda_array_interface";
  return true;
}

DType dtype_of_format(const Array& a, const char* format) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  if (f.size() == 1) switch (f[0]) {
      case 'B': return kUInt8;
      case 'b': return DType{0, 8};
      case '?': return DType{6, 8};
      case 'H': return kUInt16;
      case 'h': return DType{0, 16};
      case 'I': return DType{1, 32};
      case 'i': return kInt32;
      case 'L':
      case 'Q': return DType{1, 64};
      case 'l':
      case 'q': return DType{0, 64};
      case 'e': return kFloat16;
      case 'f': return kFloat32;
      case 'd': return DType{2, 64};
    }
  bad(a, "has buffer format '" + std::string(format) + "', not a little-endian number");
}

bool view_buffer(py::handle obj, Array& a) {
  if (!PyObject_CheckBuffer(obj.ptr())) return false;
  // A memoryview holds the exporter's buffer until it goes.
  py::object mv = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
  if (!mv) throw py::error_already_set();
  const Py_buffer* b = PyMemoryView_GET_BUFFER(mv.ptr());
  a.dtype = dtype_of_format(a, b->format);
  if (static_cast<std::size_t>(b->itemsize) != a.dtype.itemsize()) bad(a, "has a buffer item size that is not its format's");
  a.readonly = b->readonly != 0;
  a.device = -1;
  a.data = reinterpret_cast<std::uintptr_t>(b->buf);
  std::vector<std::int64_t> shape(b->ndim), strides(b->ndim);
  for (int d = 0; d < b->ndim; ++d) {
    shape[d] = b->shape ? b->shape[d] : b->len / b->itemsize;
    strides[d] = b->strides ? b->strides[d] : b->itemsize;
  }
  take_layout(a, b->ndim, shape.data(), strides.data(), true);
  a.owner = mv;
  a.protocol = "buffer";
  return true;
}

}  // namespace

std::string DType::name() const {
  const std::string w = std::to_string(bits);
  switch (code) {
    case 0: return "int" + w;
    case 1: return "uint" + w;
    case 2: return "float" + w;
    case 4: return "bfloat" + w;
    case 6: return "bool";
    default: return "dlpack type " + std::to_string(code) + "/" + w;
  }
}

std::int64_t Array::size(int dim) const {
  const int d = dim < 0 ? dim + ndim() : dim;
  if (d < 0 || d >= ndim()) bad(*this, "has no dimension " + std::to_string(dim));
  return shape[d];
}

std::int64_t Array::stride(int dim) const {
  const int d = dim < 0 ? dim + ndim() : dim;
  if (d < 0 || d >= ndim()) bad(*this, "has no dimension " + std::to_string(dim));
  return strides[d];
}

std::int64_t Array::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

std::uint64_t Array::extent_bytes() const {
  if (numel() == 0) return 0;
  std::uint64_t last = 0;
  for (int d = 0; d < ndim(); ++d) last += static_cast<std::uint64_t>(shape[d] - 1) * strides[d];
  return (last + 1) * dtype.itemsize();
}

bool Array::dense() const {
  if (numel() == 0) return true;  // as numpy and torch say: numpy's DLPack gives an empty array stride 0
  std::int64_t want = 1;
  for (int d = ndim() - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != want) return false;
    want *= shape[d];
  }
  return true;
}

std::string Array::where() const { return device < 0 ? "cpu" : "cuda:" + std::to_string(device); }

const Array& Array::on(int dev) const {
  if (device != (dev < 0 ? -1 : dev))
    bad(*this, "is on " + where() + ", expected " + (dev < 0 ? std::string("cpu") : "cuda:" + std::to_string(dev)));
  return *this;
}

const Array& Array::writable() const {
  if (readonly) bad(*this, "is read-only; gdsio writes into it");
  return *this;
}

const Array& Array::of(DType t) const {
  if (dtype != t) bad(*this, "has dtype " + dtype.name() + ", expected " + t.name());
  return *this;
}

const Array& Array::dims(int n) const {
  if (ndim() != n)
    bad(*this, "has " + std::to_string(ndim()) + " dimensions " + dims_text(shape) + ", expected " +
                   std::to_string(n));
  return *this;
}

const Array& Array::shaped(std::initializer_list<std::int64_t> want) const {
  return shaped(std::vector<std::int64_t>(want));
}

const Array& Array::shaped(const std::vector<std::int64_t>& want) const {
  bool ok = want.size() == shape.size();
  for (std::size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == shape[i];
  if (!ok) bad(*this, "has shape " + dims_text(shape) + ", expected " + dims_text(want));
  return *this;
}

const Array& Array::is_dense() const {
  if (!dense()) bad(*this, "has strides " + dims_text(strides) + " for shape " + dims_text(shape) +
                               ", expected a contiguous array");
  return *this;
}

const Array& Array::unit_stride(int dim) const {
  if (size(dim) > 1 && stride(dim) != 1)
    bad(*this, "has stride " + std::to_string(stride(dim)) + " in dimension " + std::to_string(dim) +
                   ", expected 1 (adjacent elements)");
  return *this;
}

const Array& Array::holds(std::uint64_t bytes) const {
  is_dense();
  const std::uint64_t have = static_cast<std::uint64_t>(numel()) * dtype.itemsize();
  if (have < bytes)
    bad(*this, "holds " + std::to_string(have) + " bytes, " + std::to_string(bytes) + " needed");
  return *this;
}

Array Array::row(std::int64_t i, std::string row_name) const {
  if (ndim() < 1 || i < 0 || i >= shape[0]) bad(*this, "has no row " + std::to_string(i));
  Array r = *this;  // the same memory, dtype, device and owner, one dimension less
  r.name = std::move(row_name);
  r.data += static_cast<std::uintptr_t>(i * strides[0]) * dtype.itemsize();
  r.shape.erase(r.shape.begin());
  r.strides.erase(r.strides.begin());
  return r;
}

Array view(py::handle obj, std::string name) {
  Array a;
  a.name = std::move(name);
  std::string refused;
  if (view_dlpack(obj, a, &refused) || view_cuda_interface(obj, a) || view_buffer(obj, a)) return a;
  if (!refused.empty()) throw py::value_error(a.name + ": " + refused);
  throw py::type_error(a.name + ": expected an array (a torch.Tensor, a numpy array, or an object with "
                       "__dlpack__, __cuda_array_interface__ or the buffer protocol), got " + type_name(obj));
}

std::vector<Array> view_batch(py::handle obj, const std::string& name, int item_dims) {
  std::vector<Array> out;
  const bool one = py::hasattr(obj, "__dlpack__") || py::hasattr(obj, "__cuda_array_interface__") ||
                   PyObject_CheckBuffer(obj.ptr());
  if (one) {
    const Array all = view(obj, name);
    all.dims(item_dims + 1);
    out.reserve(static_cast<std::size_t>(all.shape[0]));
    for (std::int64_t i = 0; i < all.shape[0]; ++i) out.push_back(all.row(i, name + "[" + std::to_string(i) + "]"));
    return out;
  }
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
    throw py::type_error(name + ": expected a sequence of arrays or one batched array, got " + type_name(obj));
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  out.reserve(seq.size());
  for (std::size_t i = 0; i < seq.size(); ++i) {
    out.push_back(view(seq[i], name + "[" + std::to_string(i) + "]"));
    out.back().dims(item_dims);
  }
  return out;
}

int common_device(const std::vector<const Array*>& arrays, int fallback) {
  const Array* first = nullptr;
  for (const Array* a : arrays) {
    if (!first) first = a;
    else if (a->device != first->device)
      bad(*a, "is on " + a->where() + ", but " + first->name + " is on " + first->where());
  }
  return first ? first->device : fallback;
}

}  // namespace gdsio::bindings

// The view itself, bound for tests and for gdsio's own checks.
GDSIO_EXPORT(arrays) {
  using gdsio::bindings::Array;
  py::class_<Array>(m, "ArrayView", "How gdsio._core sees an array argument (one view, validated once).")
      .def_readonly("name", &Array::name)
      .def_readonly("data", &Array::data)
      .def_readonly("shape", &Array::shape)
      .def_readonly("strides", &Array::strides)
      .def_property_readonly("dtype", [](const Array& a) { return a.dtype.name(); })
      .def_readonly("device", &Array::device)
      .def_readonly("readonly", &Array::readonly)
      .def_readonly("protocol", &Array::protocol)
      .def_property_readonly("extent_bytes", &Array::extent_bytes)
      .def_property_readonly("contiguous", &Array::dense)
      .def("__repr__", [](const Array& a) {
        return "ArrayView(" + a.name + ", " + a.dtype.name() + ", " + a.where() + ")";
      });
  m.def(
      "array_view", [](py::handle obj, const std::string& name) { return gdsio::bindings::view(obj, name); },
      py::arg("array"), py::arg("name") = "array",
      "The view gdsio._core takes of an array argument: data, shape, strides (elements), dtype, device.");
}
