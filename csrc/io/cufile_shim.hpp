// The only code that touches libcufile. It is loaded with dlopen on first use
// (never linked), the driver is opened once per process, and every failure is
// kept as a sentence that says why cuFile cannot be used here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/cufile_api.hpp"
#include "io/file.hpp"
#include "io/read_plan.hpp"

namespace gdsio {

struct CufileStatus {
  bool loaded = false;        // libcufile could be dlopen'ed
  std::string library;        // the path it was loaded from
  bool driver_open = false;   // cuFileDriverOpen succeeded
  bool true_gds = false;      // nvidia-fs or P2PDMA: DMA straight to the GPU
  std::string mode;           // "gds", "cufile-compat" or "" when unusable
  std::string reason;         // why cuFile is unusable, or why it runs in compat mode
  int version = 0;            // cuFileGetVersion, 0 when unknown
  unsigned max_batch_io_size = 0;
  unsigned batch_timeout_ms = 0;    // how long one wait for batched reads may take
  bool use_pci_p2pdma = false;      // properties.use_pci_p2pdma (cufile.json), as cuFile read it
  bool p2pdma_supported = false;    // the driver's properties say it can DMA through PCI P2PDMA
};

// Loads libcufile from `path` (empty: the loader's search path, libcufile.so.0).
// Idempotent: the first successful load wins. Never throws.
CufileStatus cufile_load(const std::string& path);
// The state now, opening the driver on `device` if `open_driver` and not yet done.
CufileStatus cufile_status(bool open_driver, int device);
// Closes the driver (atexit).
void cufile_shutdown();

// A file registered with cuFile; deregistered by the destructor.
class CufileHandle {
 public:
  CufileHandle(FileHandle& f, int device);
  ~CufileHandle();
  CufileHandle(const CufileHandle&) = delete;
  CufileHandle& operator=(const CufileHandle&) = delete;
  cufile::Handle get() const noexcept { return h_; }
  bool direct() const noexcept { return direct_; }
  // Why the file is not open with O_DIRECT ("" when it is): then cuFile serves it in compat mode.
  const std::string& direct_io_refusal() const noexcept { return refusal_; }

 private:
  cufile::Handle h_ = nullptr;
  int device_ = 0;
  bool direct_ = false;
  std::string refusal_;
};

// cuFileRead split across the reader threads, into device memory.
ReadResult cufile_read(FileHandle& f, CufileHandle& h, const std::vector<ReadRequest>& reqs,
                       const ReadOptions& opts);
// The batch API: entries of at most chunk_bytes, up to max_batch_io_size in
// flight per submission, each wait bounded by batch_timeout_ms; entries that
// time out or fail (or a batch that stops progressing, cancelled) are read
// with cuFileRead, as is everything left once a batch call (set-up, submit,
// status) fails, and res.reason says how many and why.
ReadResult cufile_read_batch(FileHandle& f, CufileHandle& h, const std::vector<ReadRequest>& reqs,
                             const ReadOptions& opts);

// cuFileBufRegister for a destination reused many times; false with a reason
// when cuFile refuses (then reads go through its bounce buffers, still correct).
bool cufile_register_buffer(void* ptr, std::size_t n, int device, std::string* reason);
void cufile_deregister_buffer(void* ptr);
std::size_t cufile_registered_buffers();

}  // namespace gdsio
