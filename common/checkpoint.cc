#include "common/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/gguf_checkpoint.h"
#include "common/hf_checkpoint.h"

namespace tandem {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string DirName(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string BaseName(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    const std::string msg = absl::StrCat(path, ": cannot open checkpoint: ", std::strerror(e));
    return e == ENOENT || e == ENOTDIR ? absl::NotFoundError(msg)
                                       : absl::PermissionDeniedError(msg);
  }
  if (S_ISDIR(st.st_mode)) {
    auto c = HfCheckpoint::Open(path);
    if (!c.ok()) return c.status();
    return std::unique_ptr<Checkpoint>(std::move(*c));
  }
  // A file of a Hugging Face directory stands for the directory.
  const std::string base = BaseName(path);
  if (base == "config.json" || EndsWith(base, ".safetensors") ||
      EndsWith(base, ".safetensors.index.json")) {
    auto c = HfCheckpoint::Open(DirName(path));
    if (!c.ok()) return c.status();
    return std::unique_ptr<Checkpoint>(std::move(*c));
  }
  auto c = GgufCheckpoint::Open(path);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Checkpoint>(std::move(*c));
}

}  // namespace tandem
