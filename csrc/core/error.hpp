// Errors of the gdsio core. Each kind maps to one Python exception in
// bindings/module.cpp; messages name the file and the problem.
#pragma once

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace gdsio {

// An operating-system failure on a path: becomes OSError(errno, message, path),
// which Python turns into FileNotFoundError, PermissionError, IsADirectoryError...
// The message does not name the path: Python's OSError prints it after the
// message ("[Errno 2] No such file or directory: 'x.bin'"), once.
class OsError : public std::runtime_error {
 public:
  OsError(int err, std::string path, const std::string& what)
      : std::runtime_error(what), errno_(err), path_(std::move(path)) {}
  int error_number() const noexcept { return errno_; }
  const std::string& path() const noexcept { return path_; }

 private:
  int errno_;
  std::string path_;
};

// A caller mistake (bad offset, size, buffer): becomes ValueError.
class ValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A CUDA runtime or driver failure: becomes RuntimeError with the CUDA error string.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A backend that cannot run here (no GPU, no libcufile, built without CUDA...):
// becomes gdsio.BackendUnavailable (a RuntimeError).
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Messages are built without iostreams: an ostringstream formats numbers
// through the global std::locale, and in a process that holds two copies of
// libstdc++'s locale code (one linked into a library from a static archive)
// the facet it finds can belong to the other copy; that crashed the first
// run on a GPU machine (bench/results/device-check-2026-12-04.md). to_chars is
// locale-free and prints what the stream printed: integers in decimal,
// floating point as %g (6 significant digits), bool as 1/0, pointers in hex.
inline void put(std::string& out, std::string_view v) { out.append(v.data(), v.size()); }
inline void put(std::string& out, const char* v) { out.append(v ? v : "(null)"); }
inline void put(std::string& out, char* v) { put(out, static_cast<const char*>(v)); }
inline void put(std::string& out, char v) { out.push_back(v); }
inline void put(std::string& out, const void* v) {
  char buf[2 + 2 * sizeof(std::uintptr_t)] = {'0', 'x'};
  const auto r = std::to_chars(buf + 2, buf + sizeof buf, reinterpret_cast<std::uintptr_t>(v), 16);
  out.append(buf, r.ptr);
}
template <typename T>
void put(std::string& out, const T& v) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    put(out, std::string_view(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    out.push_back(v ? '1' : '0');
  } else if constexpr (std::is_enum_v<T>) {
    put(out, static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (std::is_pointer_v<T>) {
    put(out, static_cast<const void*>(v));
  } else if constexpr (std::is_integral_v<T>) {
    char buf[48];
    if constexpr (sizeof(T) == 1)  // int8_t / uint8_t: a number (a stream printed a character)
      out.append(buf, std::to_chars(buf, buf + sizeof buf, static_cast<int>(v)).ptr);
    else
      out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6).ptr);
  } else {
    static_assert(sizeof(T) == 0, "concat: a type it cannot print (add a put overload)");
  }
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::string s;
  (put(s, args), ...);
  return s;
}
}  // namespace detail

[[noreturn]] inline void throw_errno(int err, const std::string& path, const std::string& what) {
  throw OsError(err, path, detail::concat(what, ": ", std::strerror(err)));
}

}  // namespace gdsio

// The message is built only when the check fails.
#define GDSIO_EXPECT(cond, ExcType, ...)                                 \
  do {                                                                   \
    if (!(cond)) throw ExcType(::gdsio::detail::concat(__VA_ARGS__));    \
  } while (0)
