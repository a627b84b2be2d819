// The slice of cufile.h that gdsio calls, declared here so that the build
// needs neither the header nor the library: libcufile is dlopen'ed at run
// time. Layouts follow cufile.h of nvidia-cufile 1.20 (CUDA 13), which keeps
// them stable since the batch API appeared (cuFile 1.6).
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace gdsio::cufile {

constexpr int kHandleTypeOpaqueFd = 1;
constexpr int kBatchMode = 1;  // CUFILE_BATCH
constexpr int kOpRead = 0;     // CUFILE_READ
// CUfileStatus_t
constexpr int kStatusWaiting = 0x1, kStatusPending = 0x2, kStatusInvalid = 0x4,
              kStatusCanceled = 0x8, kStatusComplete = 0x10, kStatusTimeout = 0x20,
              kStatusFailed = 0x40;
// PCI P2PDMA support, as the driver reports it: CU_FILE_P2P_SUPPORTED, a bit
// of DrvProps::fflags (CUfileFeatureFlags_t) since cuFile 1.14; cuFile 1.13
// set CU_FILE_NVME_P2P_SUPPORTED in nvfs.dstatusflags (deprecated since).
constexpr unsigned kFeatureP2pSupported = 4;      // CU_FILE_P2P_SUPPORTED
constexpr unsigned kDriverNvmeP2pSupported = 11;  // CU_FILE_NVME_P2P_SUPPORTED
// CUFileBoolConfigParameter_t
constexpr int kParamAllowCompatMode = 1;
constexpr int kParamForceCompatMode = 2;
constexpr int kParamUsePciP2pdma = 7;

constexpr int kOpErrorBase = 5000;  // CUFILEOP_BASE_ERR: CUfileOpError values start above it
constexpr int kCudaDriverError = 5011;  // CU_FILE_CUDA_DRIVER_ERROR: Error::cu_err holds the CUresult

struct Error {  // CUfileError_t
  int err;      // CUfileOpError
  int cu_err;   // CUresult
};

struct Descr {  // CUfileDescr_t
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};

struct DrvProps {  // CUfileDrvProps_t
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    std::size_t poll_thresh_size;
    std::size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
};

struct IOParams {  // CUfileIOParams_t
  int mode;
  union {
    struct {
      void* devPtr_base;
      off_t file_offset;
      off_t devPtr_offset;
      std::size_t size;
    } batch;
  } u;
  void* fh;
  int opcode;
  void* cookie;
};

struct IOEvents {  // CUfileIOEvents_t
  void* cookie;
  int status;
  std::size_t ret;
};

using Handle = void*;
using BatchHandle = void*;

// Text of a CUfileOpError, as cufileop_status_error() gives it.
const char* op_error_string(int err);

}  // namespace gdsio::cufile
