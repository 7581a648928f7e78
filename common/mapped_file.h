// Read-only memory mapping of a whole file (RAII), advised onto transparent
// huge pages: the kernels stream multi-GB weights through this mapping, and
// on 2 MiB pages a cold 16-row bf16 pass ran 10-15% faster on a Zen 4 VM
// (docs/PERFORMANCE.md). The kernel can only honour the advice where the
// file's pages are read in after the mapping (a file already in the page
// cache keeps the pages it was cached in); DropFromPageCache below lets a
// caller that has just written a file start it cold.
#ifndef TANDEM_COMMON_MAPPED_FILE_H_
#define TANDEM_COMMON_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, int64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  int64_t size_;
};

// Bytes of this process's file mappings that the kernel maps in 2 MiB pages
// now (FilePmdMapped in /proc/self/smaps_rollup): what of the weights took
// the advice above. Unavailable where /proc does not say.
absl::StatusOr<int64_t> FileHugePageBytes();

// Bytes in the kB field `field` of /proc/self/smaps_rollup ("FilePmdMapped",
// "ShmemPmdMapped", ...). Unavailable where /proc does not list it.
absl::StatusOr<int64_t> SmapsRollupBytes(std::string_view field);

// Writes `path`'s dirty pages back and asks the kernel to drop its cached
// pages, so that the next mapping reads it afresh (on huge pages where the
// file system allows). Advice only: pages another process maps stay.
absl::Status DropFromPageCache(const std::string& path);

}  // namespace tandem

#endif  // TANDEM_COMMON_MAPPED_FILE_H_
