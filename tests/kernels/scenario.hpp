// What the scenario programs (shim_tests.cpp, ordering_tests.cpp) share: the
// check macro and its counters, a file of known bytes, emulated device memory.
// Each program includes it once; everything is in an unnamed namespace.
#pragma once

#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace {

int g_checks = 0, g_failed = 0;

#define EXPECT(cond, ...)                                                                    \
  do {                                                                                       \
    ++g_checks;                                                                              \
    if (!(cond)) {                                                                           \
      ++g_failed;                                                                            \
      std::fprintf(stderr, "FAILED %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,              \
                   ::gdsio::detail::concat("", __VA_ARGS__).c_str());                        \
    }                                                                                        \
  } while (0)

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n    " + x;
  return s;
}

// Byte i of a test file (salted: another file's bytes).
unsigned char pattern(std::size_t i, unsigned salt = 0) {
  return static_cast<unsigned char>(((i + salt) * 2654435761u) >> 13);
}

// A file of `n` bytes whose byte i is pattern(i), in the working directory.
struct TestFile {
  std::string path;
  std::vector<unsigned char> bytes;
  TestFile(std::size_t n, const std::string& name) : path(name), bytes(n) {
    for (std::size_t i = 0; i < n; ++i) bytes[i] = pattern(i);
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || ::write(fd, bytes.data(), n) != static_cast<ssize_t>(n) || ::close(fd) != 0)
      throw std::runtime_error("cannot write " + path);
  }
  ~TestFile() { ::unlink(path.c_str()); }
};

// Emulated device memory (cudaMalloc: what cuda_pointer_kind calls "device"), filled with 0xEE.
struct DeviceBuffer {
  unsigned char* p = nullptr;
  std::size_t n;
  explicit DeviceBuffer(std::size_t size) : n(size) {
    void* v = nullptr;
    if (cudaMalloc(&v, n) != cudaSuccess) throw std::bad_alloc();
    p = static_cast<unsigned char*>(v);
    std::memset(p, 0xEE, n);
  }
  ~DeviceBuffer() { cudaFree(p); }
};

}  // namespace
