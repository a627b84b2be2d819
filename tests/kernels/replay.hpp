// The replay driver: each record of the case file (written by cases.py from
// the GPU tests' own cases) is one call of a gdsio core function, replayed on
// the CPU twin and on the emulated CUDA launcher, and compared byte for byte.
//
// Adding a kernel's cases: an op handler here (GDSIO_EMU_OP(name) in an
// ops_*.cpp file) and its recorder in cases.py (RECORDERS); see README.md.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu_control.hpp"

namespace gdsio_emu {

// One recorded call: key lines (a key may repeat, e.g. one `image` line per
// image) and the blobs (input bytes) in order.
struct Record {
  std::string name, op;
  std::map<std::string, std::vector<std::vector<std::string>>> keys;
  std::vector<std::shared_ptr<const std::string>> blobs;

  const std::vector<std::string>& line(const std::string& key) const;  // the only line of `key`
  const std::vector<std::vector<std::string>>& lines(const std::string& key) const;
  bool has(const std::string& key) const { return keys.count(key) != 0; }
  std::string str(const std::string& key) const { return line(key).at(0); }
  long long num(const std::string& key) const { return std::stoll(str(key)); }
  std::vector<float> floats(const std::string& key) const;
};

// Memory of exactly `n` bytes (a heap block of its own: AddressSanitizer
// reports the first byte past it), filled with `fill` or copied from `from`.
class Buffer {
 public:
  explicit Buffer(std::size_t n, unsigned char fill = 0) : n_(n), p_(new unsigned char[n]) { std::memset(p_.get(), fill, n); }
  Buffer(const std::string& from) : Buffer(from.size()) { std::memcpy(p_.get(), from.data(), n_); }
  unsigned char* data() const { return p_.get(); }
  std::uintptr_t addr() const { return reinterpret_cast<std::uintptr_t>(p_.get()); }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  std::unique_ptr<unsigned char[]> p_;
};

// The verdict on one record.
class Check {
 public:
  // The emulated GPU's output against the CPU twin's, byte for byte.
  void same(const std::string& what, const Buffer& gpu, const Buffer& cpu);
  void same(const std::string& what, const void* gpu, const void* cpu, std::size_t n);
  void fail(const std::string& why) { failures.push_back(why); }
  // Every launch since the record began succeeded, and there were `n` of them.
  void launches(std::size_t n);
  std::vector<std::string> failures;
  std::vector<LaunchRecord> seen;  // the record's launches (filled by launches())
  std::size_t mismatched_bytes = 0;
};

// The device and stream every replayed launch must use (fake, never dereferenced).
constexpr int kDevice = 0;
inline cudaStream_t stream() { return reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5f3e40}); }
constexpr std::size_t kCpuThreads = 2;
// Outputs start as different garbage on each side: a byte neither writes differs.
constexpr unsigned char kGpuFill = 0xCD, kCpuFill = 0x5A;

using OpFn = void (*)(const Record&, Check&);
struct OpRegistrar {
  OpRegistrar(const char* name, OpFn fn);
};
#define GDSIO_EMU_OP(name)                                                   \
  static void gdsio_emu_op_##name(const ::gdsio_emu::Record&, ::gdsio_emu::Check&); \
  static const ::gdsio_emu::OpRegistrar gdsio_emu_reg_##name(#name, gdsio_emu_op_##name); \
  static void gdsio_emu_op_##name(const ::gdsio_emu::Record& r, ::gdsio_emu::Check& check)

}  // namespace gdsio_emu
