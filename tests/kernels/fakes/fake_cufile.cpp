// A stand-in libcufile for the shim tests (shim_tests.cpp): the driver
// properties and cufile.json parameters the test configures, a file handle
// over the descriptor, cuFileRead as pread, and a batch API that can report
// entries as timed out or stop progressing (fake_cufile_set). It counts what
// it saw (fake_cufile_get) and logs cuFileRead and batch calls.
#include <fcntl.h>
#include <unistd.h>

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
};
std::map<std::string, long> g_count;

struct File {
  int fd;
};
struct Batch {
  long index;
  std::vector<cf::IOParams> entries;
  std::vector<char> done;
};
long g_batches = 0, g_entries = 0;

void log(const std::string& s) {
  if (gdsio_emu_log) gdsio_emu_log(s.c_str());
}
cf::Error ok() { return cf::Error{0, 0}; }
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

cf::Error cuFileDriverOpen() { return ok(); }
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
  *b = param == cf::kParamUsePciP2pdma ? g_cfg["p2p_param"] != 0 : false;
  return ok();
}
// Reads go through a buffered descriptor of its own, as compat mode reads
// through bounce buffers: the caller's may be O_DIRECT, its memory unaligned.
cf::Error cuFileHandleRegister(cf::Handle* h, cf::Descr* d) {
  const int fd = open(("/proc/self/fd/" + std::to_string(d->handle.fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cf::Error{5025, 0};  // driver or file access error
  *h = new File{fd};
  return ok();
}
void cuFileHandleDeregister(cf::Handle h) {
  close(static_cast<File*>(h)->fd);
  delete static_cast<File*>(h);
}
cf::Error cuFileBufRegister(const void*, std::size_t, int) { return ok(); }
cf::Error cuFileBufDeregister(const void*) { return ok(); }

ssize_t cuFileRead(cf::Handle h, void* base, std::size_t n, off_t file_off, off_t buf_off) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    ++g_count["reads"];
  }
  log("cuFileRead n=" + std::to_string(n) + " at=" + std::to_string(file_off));
  return pread(static_cast<File*>(h)->fd, static_cast<char*>(base) + buf_off, n, file_off);
}

cf::Error cuFileBatchIOSetUp(cf::BatchHandle* b, unsigned n) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto* batch = new Batch{g_batches++, {}, {}};
  batch->entries.reserve(n);
  *b = batch;
  return ok();
}
cf::Error cuFileBatchIOSubmit(cf::BatchHandle b, unsigned n, cf::IOParams* p, unsigned) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
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
  unsigned out = 0;
  if (batch->index == g_cfg["stall_batch"]) {
    // Nothing completes: the wait lasts its whole timeout, as the driver's would.
    if (ts) nanosleep(ts, nullptr);
  } else {
    for (std::size_t i = 0; i < batch->entries.size() && out < *nr; ++i) {
      if (batch->done[i]) continue;
      batch->done[i] = 1;
      const cf::IOParams& p = batch->entries[i];
      const long global = g_entries++;
      ev[out].cookie = p.cookie;
      if (g_cfg["timeout_every"] > 0 && global % g_cfg["timeout_every"] == g_cfg["timeout_every"] - 1) {
        ev[out].status = cf::kStatusTimeout;
        ev[out].ret = 0;
        ++g_count["timed_out"];
      } else {
        const ssize_t r = pread(static_cast<File*>(p.fh)->fd,
                                static_cast<char*>(p.u.batch.devPtr_base) + p.u.batch.devPtr_offset, p.u.batch.size,
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
void cuFileBatchIODestroy(cf::BatchHandle b) { delete static_cast<Batch*>(b); }

}  // extern "C"
