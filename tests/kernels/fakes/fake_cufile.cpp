// A stand-in libcufile for the shim tests (shim_tests.cpp): the driver
// properties and cufile.json parameters the test configures, a file handle
// over the descriptor, cuFileRead as pread, and a batch API that can report
// entries as timed out, failed or short, stop progressing, or fail a call
// (fake_cufile_set); the driver, a handle, a buffer registration or a read can
// fail too. It counts what it saw (fake_cufile_get) and logs cuFileRead and
// batch calls.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "io/cufile_api.hpp"

extern "C" void gdsio_emu_log(const char* line) __attribute__((weak));

namespace cf = gdsio::cufile;

namespace {
std::mutex g_mu;
std::map<std::string, long> g_cfg = {
    {"p2p_param", 0},  // properties.use_pci_p2pdma
    {"p2p_fflag", 0},  // CU_FILE_P2P_SUPPORTED in fflags (cuFile 1.14 and later)
    {"p2p_flag", 0},   // CU_FILE_NVME_P2P_SUPPORTED in nvfs.dstatusflags (cuFile 1.13)
    {"max_batch", 128}, {"timeout_ms", 0},
    {"timeout_every", 0},  // every k-th entry (k > 0) reports CUFILE_TIMEOUT
    {"stall_batch", -1},   // the batch (0-based) whose entries never complete
    {"fail_every", 0},     // every k-th entry reports CUFILE_FAILED, returning fail_ret
    {"fail_ret", -5044},   // what a failed entry returns (-CU_FILE_IO_ERROR)
    {"short_every", 0},    // every k-th entry reads half its bytes
    // CUfileOpError codes (0: succeed) for a batch call of the batch numbered fail_batch (0-based);
    // get-status fails once status_fail_after calls on that batch succeeded.
    {"setup_fail", 0}, {"submit_fail", 0}, {"status_fail", 0}, {"fail_batch", 0}, {"status_fail_after", 0},
    {"per_status", 0},  // at most this many entries complete per get-status call (0: all ready)
    {"driver_open_fail", 0}, {"handle_fail", 0}, {"buf_register_fail", 0},  // CUfileOpError codes
    {"force_compat_param", 0},  // properties.force_compat_mode
    {"eintr_every", 0},  // every k-th cuFileRead is interrupted (-1 with EINTR, or -EINTR, in turn)
    {"read_error", 0},   // every cuFileRead returns this (negative), with errno read_errno when -1
    {"read_errno", 0},
};
std::map<std::string, long> g_count;

struct File {
  int fd;
};
struct Batch {
  long index;
  std::vector<cf::IOParams> entries;
  std::vector<char> done;
  long status_calls = 0;
};
long g_batches = 0, g_entries = 0, g_reads = 0;
std::map<const void*, std::size_t> g_bufs;  // registered buffers

void log(const std::string& s) {
  if (gdsio_emu_log) gdsio_emu_log(s.c_str());
}
cf::Error ok() { return cf::Error{0, 0}; }
// The configured failure `key` (a CUfileOpError; 5011 comes with CUresult 999), or success.
cf::Error fails(const char* key) {
  const long e = g_cfg[key];
  return cf::Error{static_cast<int>(e), e == 5011 ? 999 : 0};
}
}  // namespace

extern "C" {

void fake_cufile_set(const char* key, long v) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cfg[key] = v;
}
long fake_cufile_get(const char* key) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_count[key];
}

cf::Error cuFileDriverOpen() {
  std::lock_guard<std::mutex> lk(g_mu);
  return fails("driver_open_fail");
}
cf::Error cuFileDriverClose_v2() { return ok(); }
cf::Error cuFileGetVersion(int* v) {
  *v = 1150;
  return ok();
}
cf::Error cuFileDriverGetProperties(cf::DrvProps* p) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::memset(p, 0, sizeof *p);
  p->nvfs.major_version = 0;  // no nvidia-fs
  p->nvfs.dstatusflags = (1u << 4) | (g_cfg["p2p_flag"] ? 1u << cf::kDriverNvmeP2pSupported : 0u);
  p->fflags = (1u << 1) | (g_cfg["p2p_fflag"] ? 1u << cf::kFeatureP2pSupported : 0u);  // batch IO
  p->max_batch_io_size = static_cast<unsigned>(g_cfg["max_batch"]);
  p->max_batch_io_timeout_msecs = static_cast<unsigned>(g_cfg["timeout_ms"]);
  return ok();
}
cf::Error cuFileGetParameterBool(int param, bool* b) {
  std::lock_guard<std::mutex> lk(g_mu);
  *b = param == cf::kParamUsePciP2pdma     ? g_cfg["p2p_param"] != 0
       : param == cf::kParamForceCompatMode ? g_cfg["force_compat_param"] != 0
                                            : false;
  return ok();
}
// Reads go through a buffered descriptor of its own, as compat mode reads
// through bounce buffers: the caller's may be O_DIRECT, its memory unaligned.
cf::Error cuFileHandleRegister(cf::Handle* h, cf::Descr* d) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_cfg["handle_fail"]) return fails("handle_fail");
    ++g_count["handles"];
  }
  const int fd = open(("/proc/self/fd/" + std::to_string(d->handle.fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cf::Error{5025, 0};  // driver or file access error
  *h = new File{fd};
  return ok();
}
void cuFileHandleDeregister(cf::Handle h) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    --g_count["handles"];
  }
  close(static_cast<File*>(h)->fd);
  delete static_cast<File*>(h);
}
cf::Error cuFileBufRegister(const void* p, std::size_t n, int) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_cfg["buf_register_fail"]) return fails("buf_register_fail");
  g_bufs[p] = n;
  ++g_count["buf_registered"];
  return ok();
}
cf::Error cuFileBufDeregister(const void* p) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_bufs.erase(p)) ++g_count["bad_deregisters"];
  ++g_count["buf_deregistered"];
  return ok();
}

// A read into a registered buffer must name it as the base, the place as the offset.
void check_base_locked(const void* base, off_t buf_off, std::size_t n) {
  auto it = g_bufs.find(base);
  if (it == g_bufs.end()) return;
  ++g_count["into_registered"];
  if (buf_off < 0 || static_cast<std::size_t>(buf_off) + n > it->second) ++g_count["outside_registered"];
}

ssize_t cuFileRead(cf::Handle h, void* base, std::size_t n, off_t file_off, off_t buf_off) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    ++g_count["reads"];
    check_base_locked(base, buf_off, n);
    const long k = g_reads++;
    if (g_cfg["read_error"]) {
      if (g_cfg["read_error"] == -1) errno = static_cast<int>(g_cfg["read_errno"]);
      return g_cfg["read_error"];
    }
    if (g_cfg["eintr_every"] > 0 && k % g_cfg["eintr_every"] == g_cfg["eintr_every"] - 1) {
      const long nth = g_count["eintr"]++;
      log("cuFileRead interrupted");
      if (nth % 2 == 0) {
        errno = EINTR;
        return -1;
      }
      return -EINTR;
    }
  }
  log("cuFileRead n=" + std::to_string(n) + " at=" + std::to_string(file_off));
  return pread(static_cast<File*>(h)->fd, static_cast<char*>(base) + buf_off, n, file_off);
}

cf::Error cuFileBatchIOSetUp(cf::BatchHandle* b, unsigned n) {
  std::lock_guard<std::mutex> lk(g_mu);
  ++g_count["setups"];
  if (g_cfg["setup_fail"] && g_batches == g_cfg["fail_batch"]) {
    ++g_batches;
    log("cuFileBatchIOSetUp failed");
    return fails("setup_fail");
  }
  auto* batch = new Batch{g_batches++, {}, {}};
  batch->entries.reserve(n);
  *b = batch;
  return ok();
}
cf::Error cuFileBatchIOSubmit(cf::BatchHandle b, unsigned n, cf::IOParams* p, unsigned) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  if (g_cfg["submit_fail"] && batch->index == g_cfg["fail_batch"]) {
    log("cuFileBatchIOSubmit failed batch=" + std::to_string(batch->index));
    return fails("submit_fail");
  }
  if ((long)n > g_cfg["max_batch"]) ++g_count["oversized_batches"];
  for (unsigned i = 0; i < n; ++i) {
    batch->entries.push_back(p[i]);
    batch->done.push_back(0);
    g_count["max_entry"] = std::max<long>(g_count["max_entry"], static_cast<long>(p[i].u.batch.size));
    ++g_count["entries"];
  }
  log("cuFileBatchIOSubmit batch=" + std::to_string(batch->index) + " n=" + std::to_string(n));
  return ok();
}
cf::Error cuFileBatchIOGetStatus(cf::BatchHandle b, unsigned, unsigned* nr, cf::IOEvents* ev, struct timespec* ts) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  ++g_count["get_status"];
  if (!ts) ++g_count["waits_without_timeout"];
  else g_count["timeout_ms"] = ts->tv_sec * 1000 + ts->tv_nsec / 1000000;
  if (g_cfg["status_fail"] && batch->index == g_cfg["fail_batch"] && batch->status_calls >= g_cfg["status_fail_after"]) {
    log("cuFileBatchIOGetStatus failed batch=" + std::to_string(batch->index));
    return fails("status_fail");
  }
  ++batch->status_calls;
  unsigned limit = *nr;
  if (g_cfg["per_status"] > 0) limit = std::min<unsigned>(limit, static_cast<unsigned>(g_cfg["per_status"]));
  unsigned out = 0;
  if (batch->index == g_cfg["stall_batch"]) {
    // Nothing completes: the wait lasts its whole timeout, as the driver's would.
    if (ts) nanosleep(ts, nullptr);
  } else {
    for (std::size_t i = 0; i < batch->entries.size() && out < limit; ++i) {
      if (batch->done[i]) continue;
      batch->done[i] = 1;
      const cf::IOParams& p = batch->entries[i];
      const long global = g_entries++;
      auto every = [&](const char* key) { return g_cfg[key] > 0 && global % g_cfg[key] == g_cfg[key] - 1; };
      ev[out].cookie = p.cookie;
      check_base_locked(p.u.batch.devPtr_base, p.u.batch.devPtr_offset, p.u.batch.size);
      if (every("timeout_every")) {
        ev[out].status = cf::kStatusTimeout;
        ev[out].ret = 0;
        ++g_count["timed_out"];
      } else if (every("fail_every")) {
        ev[out].status = cf::kStatusFailed;
        ev[out].ret = static_cast<std::size_t>(g_cfg["fail_ret"]);
        ++g_count["failed"];
      } else {
        const std::size_t want = every("short_every") ? p.u.batch.size / 2 : p.u.batch.size;
        if (want < p.u.batch.size) ++g_count["short"];
        const ssize_t r = pread(static_cast<File*>(p.fh)->fd,
                                static_cast<char*>(p.u.batch.devPtr_base) + p.u.batch.devPtr_offset, want,
                                p.u.batch.file_offset);
        ev[out].status = r < 0 ? cf::kStatusFailed : cf::kStatusComplete;
        ev[out].ret = static_cast<std::size_t>(r);
      }
      ++out;
    }
  }
  *nr = out;
  return ok();
}
cf::Error cuFileBatchIOCancel(cf::BatchHandle b) {
  std::lock_guard<std::mutex> lk(g_mu);
  ++g_count["cancels"];
  log("cuFileBatchIOCancel batch=" + std::to_string(static_cast<Batch*>(b)->index));
  return ok();
}
void cuFileBatchIODestroy(cf::BatchHandle b) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    ++g_count["destroyed"];
  }
  delete static_cast<Batch*>(b);
}

}  // extern "C"
