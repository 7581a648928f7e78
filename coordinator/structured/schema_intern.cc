#include "coordinator/structured/schema_intern.h"

#include <algorithm>
#include <utility>

namespace tandem::structured {

SchemaInterner& SchemaInterner::Global() {
  static SchemaInterner* const kTable = new SchemaInterner();
  return *kTable;
}

std::shared_ptr<const CompiledSchema> SchemaInterner::Find(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.used = ++tick_;
  ++hits_;
  return it->second.schema;
}

std::shared_ptr<const CompiledSchema> SchemaInterner::Insert(
    const std::string& key, std::shared_ptr<const CompiledSchema> schema) {
  if (!Internable(key)) return schema;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.try_emplace(key);
  it->second.used = ++tick_;
  if (!inserted) return it->second.schema;
  it->second.schema = std::move(schema);
  key_bytes_ += key.size();
  // Drop the least recently used others until within both limits (a
  // linear scan: the table is small, and this runs once per compilation).
  while (entries_.size() > 1 &&
         (entries_.size() > static_cast<size_t>(kMaxEntries) || key_bytes_ > kMaxKeyBytes)) {
    auto oldest = entries_.end();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->first == key) continue;
      if (oldest == entries_.end() || e->second.used < oldest->second.used) oldest = e;
    }
    key_bytes_ -= oldest->first.size();
    entries_.erase(oldest);
  }
  it = entries_.find(key);
  return it->second.schema;
}

int64_t SchemaInterner::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t SchemaInterner::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

}  // namespace tandem::structured
