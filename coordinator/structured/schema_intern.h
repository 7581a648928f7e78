// Compiled schemas shared by the requests that ask for the same one.
//
// Token masks are cached by grammar state (token_mask.h), and a state names
// its schema by id, so two requests share cached masks only when they share
// the compiled schema. Clients send the same response_format, or the same
// tool list under tool_choice "required", with every request; interning
// the compiled form by the schema's text lets the second request start
// where the first left the mask cache (and skips compiling again, which
// for a `pattern` means building its automaton).
//
// The table holds the kMaxEntries schemas used last, and no more than
// kMaxKeyBytes of their texts; a text longer than kMaxKeyBytes / 4 is
// compiled every time. A schema in use stays valid when the table drops
// it: requests hold it by shared_ptr.
#ifndef TANDEM_COORDINATOR_STRUCTURED_SCHEMA_INTERN_H_
#define TANDEM_COORDINATOR_STRUCTURED_SCHEMA_INTERN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tandem::structured {

class CompiledSchema;

class SchemaInterner {
 public:
  static constexpr int kMaxEntries = 32;
  static constexpr size_t kMaxKeyBytes = size_t{8} << 20;

  // The process's table (CompiledSchema::Compile and Choice use it).
  static SchemaInterner& Global();

  // The schema interned under `key`, or null.
  std::shared_ptr<const CompiledSchema> Find(const std::string& key);
  // Interns `schema` under `key` (a schema already there for the key is
  // kept: the two are the same compilation of the same text), dropping the
  // least recently used entries past the limits.
  std::shared_ptr<const CompiledSchema> Insert(const std::string& key,
                                               std::shared_ptr<const CompiledSchema> schema);
  // Whether `key` may be interned at all.
  static bool Internable(const std::string& key) { return key.size() <= kMaxKeyBytes / 4; }

  int64_t size() const;
  int64_t hits() const;

 private:
  struct Entry {
    std::shared_ptr<const CompiledSchema> schema;
    int64_t used = 0;  // tick of the last Find or Insert
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t key_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_SCHEMA_INTERN_H_
