#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    auto msg = absl::StrCat(path, ": cannot open: ", std::strerror(e));
    return e == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const int64_t size = st.st_size;
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(e)));
    }
#ifdef MADV_HUGEPAGE
    (void)::madvise(p, static_cast<size_t>(size), MADV_HUGEPAGE);  // advice; 4 KiB pages work
#endif
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

absl::StatusOr<int64_t> SmapsRollupBytes(std::string_view field) {
  std::ifstream rollup("/proc/self/smaps_rollup");
  if (!rollup) return absl::UnavailableError("/proc/self/smaps_rollup: cannot open");
  const std::string prefix = std::string(field) + ":";
  std::string line;
  while (std::getline(rollup, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    long long kib = 0;
    if (std::sscanf(line.c_str() + prefix.size(), " %lld kB", &kib) == 1) return kib * 1024;
  }
  return absl::UnavailableError(
      absl::StrCat("/proc/self/smaps_rollup: no ", std::string(field), " line"));
}

absl::StatusOr<int64_t> FileHugePageBytes() { return SmapsRollupBytes("FilePmdMapped"); }

absl::Status DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    auto msg = absl::StrCat(path, ": cannot open: ", std::strerror(e));
    return e == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  // Dirty pages cannot be dropped: write them first.
  int rc = ::fdatasync(fd);
  const int sync_errno = errno;
  if (rc == 0) rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat(
        path, ": cannot drop from the page cache: ", std::strerror(rc > 0 ? rc : sync_errno)));
  }
  return absl::OkStatus();
}

}  // namespace tandem
