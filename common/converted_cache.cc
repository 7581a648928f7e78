#include "common/converted_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cache_dir.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'A', 'N', 'D', 'M', 'C', 'V', 'T'};
constexpr uint32_t kVersion = 1;

// The header; the rest of its 64 bytes is zero. The identity's hash ties an entry to
// the model file it came from, beyond the directory's key.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t ggml_type;
  uint32_t dtype;
  uint32_t reserved;
  int64_t nbytes;
  uint64_t identity_hash;
};
static_assert(sizeof(Header) <= ConvertedCache::kHeaderBytes);

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// "<size> <mtime ns> <dev> <ino>", or empty when the file cannot be stat'ed.
std::string Identity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_size, " ",
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                      " ", st.st_dev, " ", st.st_ino);
}

Header MakeHeader(const ConvertedCache::Entry& e, const std::string& identity) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.ggml_type = e.ggml_type;
  h.dtype = static_cast<uint32_t>(e.dtype);
  h.nbytes = e.nbytes;
  h.identity_hash = Fnv1a(identity);
  return h;
}

// Writes all of `n` bytes; false on any error.
bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string TempName(const std::string& path) {
  std::random_device rd;
  return absl::StrFormat("%s.tmp.%d.%08x", path, static_cast<int>(getpid()), rd());
}

// Removes the directories of model files that are gone or have changed since.
void Sweep(const fs::path& root, const fs::path& keep) {
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    if (!d.is_directory(ec) || d.path() == keep) continue;
    std::ifstream f(d.path() / "source");
    std::string path, identity;
    if (!std::getline(f, path) || !std::getline(f, identity)) {
      // A directory another process is setting up has no source file for a moment;
      // leave those younger than a minute.
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(d.path(), ec);
      if (ec || age < std::chrono::minutes(1)) continue;
    } else if (Identity(path) == identity) {
      continue;
    }
    fs::remove_all(d.path(), ec);
  }
}

// Bytes of the regular files under `dir`.
int64_t TreeBytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(dir, ec)) {
    std::error_code fec;
    if (f.is_regular_file(fec)) total += static_cast<int64_t>(f.file_size(fec));
  }
  return total;
}

// Removes the conversions of the models opened least recently (by the time
// their source file was last touched) until the whole cache holds at most
// `cap` bytes or only `keep` (the model being opened) is left. A process
// that still maps a removed entry keeps its pages; the next one converts
// again.
void Evict(const fs::path& root, const fs::path& keep, int64_t cap) {
  struct Dir {
    fs::path path;
    fs::file_time_type used;
    int64_t bytes;
  };
  std::vector<Dir> others;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    std::error_code dec;
    if (!d.is_directory(dec)) continue;
    const int64_t bytes = TreeBytes(d.path());
    total += bytes;
    if (d.path() == keep) continue;
    const fs::file_time_type used = fs::last_write_time(d.path() / "source", dec);
    if (dec) continue;  // being set up by another process: not ours to judge
    others.push_back({d.path(), used, bytes});
  }
  std::sort(others.begin(), others.end(),
            [](const Dir& a, const Dir& b) { return a.used < b.used; });
  for (const Dir& d : others) {
    if (total <= cap) break;
    std::error_code rec;
    fs::remove_all(d.path, rec);
    if (!rec) total -= d.bytes;
  }
}

}  // namespace

absl::StatusOr<int64_t> ConvertedCache::MaxBytesFromEnvironment() {
  const char* v = std::getenv("TANDEM_CONVERTED_CACHE_MAX_GB");
  if (v == nullptr || *v == '\0') return int64_t{-1};
  char* end = nullptr;
  const double gb = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(gb >= 0) || gb > 1e9) {
    return absl::InvalidArgumentError(
        absl::StrCat("TANDEM_CONVERTED_CACHE_MAX_GB=", v, " is not a size in GB (a number >= 0)"));
  }
  return static_cast<int64_t>(gb * 1e9);
}

std::unique_ptr<ConvertedCache> ConvertedCache::ForModel(const std::string& model_path,
                                                         std::string* why_not) {
  const auto fail = [&](std::string reason) -> std::unique_ptr<ConvertedCache> {
    if (why_not != nullptr) *why_not = std::move(reason);
    return nullptr;
  };
  if (const char* v = std::getenv("TANDEM_CONVERTED_CACHE");
      v != nullptr && std::string_view(v) == "off") {
    return fail("TANDEM_CONVERTED_CACHE=off");
  }
  const absl::StatusOr<int64_t> max_bytes = MaxBytesFromEnvironment();
  if (!max_bytes.ok()) return fail(std::string(max_bytes.status().message()));
  std::error_code ec;
  const fs::path real = fs::canonical(model_path, ec);
  if (ec) return fail(absl::StrCat(model_path, ": ", ec.message()));
  const std::string identity = Identity(real.string());
  if (identity.empty()) return fail(absl::StrCat(real.string(), ": cannot stat"));
  const fs::path root = fs::path(TandemCacheDir()) / "converted";
  const fs::path dir =
      root / absl::StrFormat("%016x", Fnv1a(absl::StrCat(real.string(), "\n", identity)));
  fs::create_directories(dir, ec);
  if (ec) return fail(absl::StrCat(dir.string(), ": ", ec.message()));
  // Weights are code, in effect: use only directories this user owns and no one else
  // may write, in case TANDEM_CACHE_DIR points somewhere shared.
  // (The root may be a link, to another disk say; the model's directory, made here,
  // may not.)
  // A link in the model directory's place is refused before chmod could follow it.
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(absl::StrCat(dir.string(), ": not a directory of this user's alone"));
  }
  for (const fs::path& d : {root, dir}) {
    fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace, ec);
    const int r = d == root ? stat(d.c_str(), &st) : lstat(d.c_str(), &st);
    if (r != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return fail(absl::StrCat(d.string(), ": not a directory of this user's alone"));
    }
  }
  const fs::path source = dir / "source";
  if (!fs::exists(source, ec)) {
    const std::string tmp = TempName(source.string());
    {
      std::ofstream out(tmp);
      out << real.string() << "\n" << identity << "\n";
      if (!out.good()) {
        fs::remove(tmp, ec);
        return fail(absl::StrCat(tmp, ": cannot write"));
      }
    }
    fs::rename(tmp, source, ec);
    if (ec) {
      fs::remove(tmp, ec);
      return fail(absl::StrCat(source.string(), ": ", ec.message()));
    }
  }
  // The model's last use, for the size cap: the source file's time.
  fs::last_write_time(source, fs::file_time_type::clock::now(), ec);
  Sweep(root, dir);
  if (*max_bytes >= 0) Evict(root, dir, *max_bytes);
  return std::unique_ptr<ConvertedCache>(new ConvertedCache(dir.string(), identity));
}

std::string ConvertedCache::EntryPath(const Entry& e) const {
  // The name comes from the file: escape everything but [A-Za-z0-9._-] so that it
  // cannot leave the directory, and hash names too long for one.
  std::string name = "t_";
  for (unsigned char c : e.tensor) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&name, "%%%02X", c);
    }
  }
  if (name.size() > 200) name = absl::StrFormat("h_%016x", Fnv1a(e.tensor));
  return (fs::path(dir_) / name).string();
}

std::unique_ptr<MappedFile> ConvertedCache::Find(const Entry& e) const {
  const std::string path = EntryPath(e);
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  auto m = MappedFile::Open(path);
  const Header want = MakeHeader(e, identity_);
  if (m.ok() && (*m)->size() == kHeaderBytes + e.nbytes &&
      std::memcmp((*m)->data(), &want, sizeof want) == 0) {
    return std::move(*m);
  }
  fs::remove(path, ec);  // not whole, or from another version: make it again
  return nullptr;
}

absl::StatusOr<std::unique_ptr<MappedFile>> ConvertedCache::Store(const Entry& e,
                                                                  const void* data) const {
  const std::string path = EntryPath(e);
  const std::string tmp = TempName(path);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  }
  uint8_t header[kHeaderBytes] = {};
  const Header h = MakeHeader(e, identity_);
  std::memcpy(header, &h, sizeof h);
  const bool ok = WriteAll(fd, header, sizeof header) &&
                  WriteAll(fd, data, static_cast<size_t>(e.nbytes)) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  std::error_code ec;
  if (!ok) {
    fs::remove(tmp, ec);
    return absl::UnavailableError(absl::StrCat(tmp, ": ", std::strerror(err)));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::UnavailableError(absl::StrCat(path, ": ", ec.message()));
  }
  return MappedFile::Open(path);
}

}  // namespace tandem
