// What every backend shares: the options of one call, its result, and the
// split of one or many requests into chunks for the reader threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gdsio {

struct ReadOptions {
  std::size_t threads = 4;            // reader threads for this call
  std::size_t chunk_bytes = 4 << 20;  // bytes per task (a multiple of 4096)
  std::size_t staging_buffers = 3;    // pinned: staging buffers per reader thread
  bool direct_io = false;             // posix/pinned: read with O_DIRECT
  int device = 0;                     // CUDA device of the destination
  std::uintptr_t stream = 0;          // cudaStream_t of the caller, as an int
};

struct ReadResult {
  std::string backend;  // gds, cufile-compat, pinned, posix
  std::uint64_t nbytes = 0;
  double seconds = 0.0;
  std::size_t threads = 0;
  std::size_t chunks = 0;
  bool direct_io = false;
  std::string reason;  // why a better path (or O_DIRECT) was not used
};

// One read of a batch: `size` bytes at `file_offset` into `dst`.
struct ReadRequest {
  void* dst = nullptr;
  std::uint64_t size = 0;
  std::uint64_t file_offset = 0;
};

struct Chunk {
  char* dst;
  std::uint64_t file_offset;
  std::size_t len;
};

// Splits requests at file offsets that are multiples of chunk_bytes, so that
// every chunk but a request's first starts 4096-aligned in the file.
std::vector<Chunk> plan_chunks(const std::vector<ReadRequest>& reqs, std::size_t chunk_bytes);

// Checks the options and clamps threads to [1, 256]; throws ValueError.
ReadOptions checked(ReadOptions o);

}  // namespace gdsio
