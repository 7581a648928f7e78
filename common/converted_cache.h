// An on-disk cache of GGUF tensors converted at load (common/converted_quant.h). The
// processes of one server (gpu_worker, cpu_worker, ...) map one copy, shared in the
// page cache; the kernel can take those pages back under memory pressure like the model
// file's own; and a restart maps them instead of converting again.
//
// Layout: <TandemCacheDir()>/converted/<key>/<tensor name>, where key hashes the model
// file's real path, size, modification time, device and inode: a changed file gets a
// new key. <key>/source names the model file; opening a model removes the directories
// of files that are gone or changed. Each entry is a 64-byte header (magic, version,
// ggml type, compute dtype, byte count, the source's identity) and then the converted
// bytes; it is written under a temporary name, synced and renamed, so a reader sees a
// whole entry or none, and one with a header that does not match is removed.
//
// TANDEM_CONVERTED_CACHE_MAX_GB=N caps the cache: when a model is opened, the
// conversions of the models opened least recently are removed until the cache holds at
// most N GB (10^9 bytes) or only the model being opened (which may alone exceed it).
//
// The directories are made 0700 and used only when this user owns them and no one else
// can write them (a cache entry is trusted as weights). TANDEM_CONVERTED_CACHE=off
// turns the cache off: conversions then live in process memory, as they do when the
// directory cannot be written or is not this user's.
#ifndef TANDEM_COMMON_CONVERTED_CACHE_H_
#define TANDEM_COMMON_CONVERTED_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/mapped_file.h"

namespace tandem {

class ConvertedCache {
 public:
  // What an entry holds; all of it is checked when the entry is found.
  struct Entry {
    std::string tensor;  // the GGUF tensor name
    uint32_t ggml_type = 0;
    DType dtype = DType::kF32;
    int64_t nbytes = 0;
  };

  // The cache for one model file, or null when the cache is off or its directory cannot
  // be made (the reason goes to `why_not` when given).
  static std::unique_ptr<ConvertedCache> ForModel(const std::string& model_path,
                                                  std::string* why_not = nullptr);

  // The entry's bytes, mapped (data() + kHeaderBytes), or null when absent or not whole.
  std::unique_ptr<MappedFile> Find(const Entry& e) const;
  // Writes the entry (`e.nbytes` bytes at `data`) and maps it.
  absl::StatusOr<std::unique_ptr<MappedFile>> Store(const Entry& e, const void* data) const;

  const std::string& dir() const { return dir_; }

  // TANDEM_CONVERTED_CACHE_MAX_GB in bytes; -1 when unset; InvalidArgument when it is
  // not a number >= 0.
  static absl::StatusOr<int64_t> MaxBytesFromEnvironment();

  static constexpr int64_t kHeaderBytes = 64;

 private:
  ConvertedCache(std::string dir, std::string identity)
      : dir_(std::move(dir)), identity_(std::move(identity)) {}
  std::string EntryPath(const Entry& e) const;

  std::string dir_;
  std::string identity_;  // "<size> <mtime ns> <dev> <ino>" of the model file
};

}  // namespace tandem

#endif  // TANDEM_COMMON_CONVERTED_CACHE_H_
