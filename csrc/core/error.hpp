// Errors of the gdsio core. Each kind maps to one Python exception in
// bindings/module.cpp; messages name the file and the problem.
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

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
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
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
