#include "common/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/shm/shm_sync.h"
#include "common/status_macros.h"

namespace tandem::shm {
namespace {

// absl here is built without std::string_view support: bridge explicitly.
absl::string_view SV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr int64_t kMaxPayloadBytes = int64_t{1} << 42;  // 4 TiB
constexpr size_t kMaxNameSuffix = 200;
constexpr const char* kShmDir = "/dev/shm";
constexpr time_t kAbandonedAfterSeconds = 60;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

std::string ErrnoText(int e) { return std::strerror(e); }

absl::Status OpenError(std::string_view name, const char* what, int e) {
  const std::string msg =
      absl::StrCat("shm segment ", SV(name), ": ", SV(what), ": ", ErrnoText(e));
  switch (e) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EFBIG:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// Checks a mapped header against the layout this build understands.
absl::Status CheckHeader(std::string_view name, const SegmentHeader& h, int64_t file_size) {
  const uint32_t ready = Atomic(const_cast<uint32_t&>(h.ready)).load(std::memory_order_acquire);
  if (h.magic != kSegmentMagic) {
    if (ready == 0 && h.magic == 0) {
      return absl::UnavailableError(
          absl::StrCat("shm segment ", SV(name), ": still being initialized by its creator"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("shm segment ", SV(name), ": not a Tandem segment (bad magic)"));
  }
  if (h.version != kSegmentLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrCat("shm segment ", SV(name), ": layout version ",
                                                      h.version, ", this build reads ",
                                                      kSegmentLayoutVersion));
  }
  if (h.header_bytes != static_cast<uint64_t>(kSegmentHeaderBytes) ||
      h.total_bytes != static_cast<uint64_t>(file_size)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm segment ", SV(name), ": header says ", h.total_bytes, " bytes (header ",
                     h.header_bytes, "), the segment has ", file_size));
  }
  if (ready == 0) {
    return absl::UnavailableError(absl::StrCat("shm segment ", SV(name), ": created by pid ",
                                               h.creator_pid, " but not ready yet"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view SegmentKindName(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kRaw:
      return "raw";
    case SegmentKind::kSlotRing:
      return "slot ring";
    case SegmentKind::kWeightStore:
      return "weight store";
  }
  return "unknown";
}

absl::Status ValidateSegmentName(std::string_view name) {
  if (!absl::StartsWith(SV(name), SV(kSegmentNamePrefix)) ||
      name.size() == kSegmentNamePrefix.size() ||
      name.size() > kSegmentNamePrefix.size() + kMaxNameSuffix ||
      !std::all_of(name.begin() + 1, name.end(), IsNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shm segment name \"", SV(name), "\": want \"", SV(kSegmentNamePrefix),
                     "\" followed by 1..", kMaxNameSuffix, " of [A-Za-z0-9._-]"));
  }
  return absl::OkStatus();
}

std::string MakeSegmentName(std::string_view purpose) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(SV(kSegmentNamePrefix), SV(purpose), "-", ::getpid(), "-",
                      counter.fetch_add(1, std::memory_order_relaxed));
}

namespace {

// Weight stores are streamed through by the CPU kernels, which run 10-15%
// faster on 2 MiB pages (mapped_file.h). Segments in /dev/shm take the
// advice only where that tmpfs is mounted with huge=advise (or always,
// within_size); the default, huge=never, ignores it (huge_pages.h says
// which applies; docs/PERFORMANCE.md).
void AdviseHugePages(SegmentKind kind, void* p, int64_t bytes) {
#ifdef MADV_HUGEPAGE
  if (kind == SegmentKind::kWeightStore) {
    (void)::madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  }
#endif
}

// Faults every page of [p, p + bytes) in for writing, as a write would,
// but returns an errno where the write would raise SIGBUS. 0 on success,
// EINVAL where the kernel lacks MADV_POPULATE_WRITE.
int PopulateWrite(void* p, int64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  return ::madvise(p, static_cast<size_t>(bytes), MADV_POPULATE_WRITE) == 0 ? 0 : errno;
#else
  (void)p;
  (void)bytes;
  return EINVAL;
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(std::string_view name,
                                                               int64_t payload_bytes,
                                                               const SegmentOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateSegmentName(name));
  if (payload_bytes <= 0 || payload_bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm segment ", SV(name), ": payload of ", payload_bytes, " bytes"));
  }
  const std::string name_str(name);
  const int64_t total = kSegmentHeaderBytes + payload_bytes;
  const int fd = ::shm_open(name_str.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return OpenError(name, "cannot create", errno);
  auto fail = [&](const char* what, int e) {
    ::close(fd);
    ::shm_unlink(name_str.c_str());
    return OpenError(name, what, e);
  };
  const std::string reserve_error = absl::StrCat("cannot reserve ", total, " bytes");
  // A weight store is reserved through its mapping, after the huge-page
  // advice: fallocate gives a tmpfs file its pages with no mapping to
  // advise, so under huge=advise they would all be 4 KiB.
  const bool populate = options.reserve && options.kind == SegmentKind::kWeightStore;
  // fallocate refuses a size past the mount's free space before taking any;
  // populating would fill /dev/shm first, so check as it does.
  struct statvfs fs;
  if (populate && ::fstatvfs(fd, &fs) == 0 && fs.f_blocks > 0 &&
      static_cast<uint64_t>(total) > static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) {
    return fail(reserve_error.c_str(), ENOSPC);
  }
  int rc = EOPNOTSUPP;
  if (options.reserve && !populate) rc = ::posix_fallocate(fd, 0, total);
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd, total) != 0) return fail("cannot size", errno);
  } else if (rc != 0) {
    return fail(reserve_error.c_str(), rc);
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("cannot map", errno);
  AdviseHugePages(options.kind, p, total);  // before the payload is written
  if (populate) {
    rc = PopulateWrite(p, total);
    // Kernels before 5.14 do not know the advice: reserve as for the rest
    // (and, as for the rest, go on unreserved where fallocate is refused).
    if (rc == EINVAL) rc = ::posix_fallocate(fd, 0, total);
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
      ::munmap(p, static_cast<size_t>(total));
      // Populating reports a full /dev/shm as EFAULT (where a write would
      // have raised SIGBUS).
      return fail(reserve_error.c_str(), rc == EFAULT ? ENOSPC : rc);
    }
  }
  ::close(fd);

  auto* h = static_cast<SegmentHeader*>(p);
  const ProcessIdentity self = ProcessIdentity::Self();
  h->version = kSegmentLayoutVersion;
  h->kind = static_cast<uint32_t>(options.kind);
  h->total_bytes = static_cast<uint64_t>(total);
  h->header_bytes = static_cast<uint64_t>(kSegmentHeaderBytes);
  h->creator_pid = static_cast<int32_t>(::getpid());
  h->creator_start_time = self.start_time;
  h->creator_pid_ns = self.pid_ns;
  std::memcpy(h->name, name.data(), std::min(name.size(), sizeof(h->name) - 1));
  Atomic(h->magic).store(kSegmentMagic, std::memory_order_release);

  std::unique_ptr<ShmSegment> seg(
      new ShmSegment(name_str, static_cast<uint8_t*>(p), total, /*owner=*/true, /*writable=*/true));
  seg->owner_pid_ = h->creator_pid;
  if (options.mark_ready) seg->MarkReady();
  return seg;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(std::string_view name, Access access) {
  TANDEM_RETURN_IF_ERROR(ValidateSegmentName(name));
  const std::string name_str(name);
  const bool writable = access == Access::kReadWrite;
  const int fd = ::shm_open(name_str.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
  if (fd < 0) return OpenError(name, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return OpenError(name, "cannot stat", e);
  }
  const int64_t size = st.st_size;
  if (size < kSegmentHeaderBytes) {
    ::close(fd);
    if (size == 0) {
      return absl::UnavailableError(
          absl::StrCat("shm segment ", SV(name), ": empty (its creator is still sizing it)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("shm segment ", SV(name), ": ", size, " bytes, smaller than a Tandem header"));
  }
  const int prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
  void* p = ::mmap(nullptr, static_cast<size_t>(size), prot, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (p == MAP_FAILED) return OpenError(name, "cannot map", map_errno);
  std::unique_ptr<ShmSegment> seg(
      new ShmSegment(name_str, static_cast<uint8_t*>(p), size, /*owner=*/false, writable));
  TANDEM_RETURN_IF_ERROR(CheckHeader(name, seg->header(), size));
  return seg;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(std::string_view name, Access access,
                                                             SegmentKind expected_kind) {
  TANDEM_ASSIGN_OR_RETURN(auto seg, Open(name, access));
  if (seg->kind() != expected_kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm segment ", SV(name), " holds a ", SV(SegmentKindName(seg->kind())),
                     ", expected a ", SV(SegmentKindName(expected_kind))));
  }
  AdviseHugePages(expected_kind, seg->base(), seg->size());
  return seg;
}

ShmSegment::~ShmSegment() {
  ::munmap(base_, static_cast<size_t>(size_));
  if (owner_ && !unlinked_ && owner_pid_ == static_cast<int32_t>(::getpid())) {
    ::shm_unlink(name_.c_str());
  }
}

void ShmSegment::MarkReady() {
  TANDEM_CHECK(owner_);
  auto* h = reinterpret_cast<SegmentHeader*>(base_);
  Atomic(h->ready).store(1, std::memory_order_release);
}

absl::Status ShmSegment::Unlink() {
  if (!owner_ || owner_pid_ != static_cast<int32_t>(::getpid())) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm segment ", name_, ": only its creator process may unlink it"));
  }
  if (unlinked_) return absl::OkStatus();
  unlinked_ = true;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    return OpenError(name_, "cannot unlink", errno);
  }
  return absl::OkStatus();
}

bool ShmSegment::ContainsPayloadRange(uint64_t offset, uint64_t bytes) const {
  const uint64_t size = static_cast<uint64_t>(size_);
  return offset >= static_cast<uint64_t>(kSegmentHeaderBytes) && offset <= size &&
         bytes <= size - offset;
}

std::vector<std::string> ListSegments(std::string_view prefix) {
  std::vector<std::string> out;
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return out;
  const absl::string_view file_prefix = absl::StripPrefix(SV(prefix), "/");
  while (const struct dirent* e = ::readdir(dir)) {
    const absl::string_view fname = e->d_name;
    if (fname == "." || fname == "..") continue;
    if (absl::StartsWith(fname, file_prefix)) out.push_back(absl::StrCat("/", fname));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<int> RemoveStaleSegments(std::string_view prefix) {
  if (!absl::StartsWith(SV(prefix), SV(kSegmentNamePrefix)) ||
      !std::all_of(prefix.begin() + 1, prefix.end(), IsNameChar)) {
    return absl::InvalidArgumentError(absl::StrCat("bad shm segment prefix \"", SV(prefix),
                                                   "\": want \"", SV(kSegmentNamePrefix), "...\""));
  }
  int removed = 0;
  const time_t now = ::time(nullptr);
  for (const std::string& name : ListSegments(prefix)) {
    if (!ValidateSegmentName(name).ok()) continue;
    const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      continue;
    }
    // A creator that died between shm_open and writing the header leaves an
    // empty or all-zero file; one that old is garbage.
    const bool old = now - st.st_mtime > kAbandonedAfterSeconds;
    bool stale = false;
    if (st.st_size < kSegmentHeaderBytes) {
      stale = st.st_size == 0 && old;
    } else if (void* p = ::mmap(nullptr, static_cast<size_t>(kSegmentHeaderBytes), PROT_READ,
                                MAP_SHARED, fd, 0);
               p != MAP_FAILED) {
      const auto* h = static_cast<const SegmentHeader*>(p);
      if (h->magic == kSegmentMagic) {
        stale = !IsProcessAlive({h->creator_pid, h->creator_start_time, h->creator_pid_ns});
      } else {
        const auto* bytes = static_cast<const uint8_t*>(p);
        stale = old &&
                std::all_of(bytes, bytes + sizeof(SegmentHeader), [](uint8_t b) { return b == 0; });
      }
      ::munmap(p, static_cast<size_t>(kSegmentHeaderBytes));
    }
    ::close(fd);
    if (stale && ::shm_unlink(name.c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace tandem::shm
