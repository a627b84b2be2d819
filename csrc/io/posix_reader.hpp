// The posix backend: chunked pread over the thread pool into host memory,
// optionally with O_DIRECT. Needs no GPU.
#pragma once

#include <vector>

#include "io/file.hpp"
#include "io/read_plan.hpp"

namespace gdsio {

// Reads every request into host memory. With opts.direct_io on a file system
// that refuses O_DIRECT, reads buffered and says so in ReadResult::reason.
ReadResult posix_read(FileHandle& f, const std::vector<ReadRequest>& reqs, const ReadOptions& opts);

}  // namespace gdsio
