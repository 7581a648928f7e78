#include "coordinator/frontend/ordered_body.h"

namespace tandem::frontend {

nlohmann::ordered_json OrderedBody::At(const std::string& pointer,
                                       const nlohmann::json& parsed) const {
  if (text_.empty()) return nlohmann::ordered_json(parsed);
  if (!doc_.has_value()) {
    doc_ = nlohmann::ordered_json::parse(text_.begin(), text_.end(), nullptr,
                                         /*allow_exceptions=*/false);
  }
  if (doc_->is_discarded()) return nlohmann::ordered_json(parsed);
  // A pointer that is not well formed (json_pointer's constructor would
  // throw) is never asked for: the callers build them from keys they read.
  const nlohmann::ordered_json::json_pointer at(pointer);
  if (!doc_->contains(at)) return nlohmann::ordered_json(parsed);
  const nlohmann::ordered_json& value = (*doc_)[at];
  // The same value (a body with a key written twice may differ: keep the
  // parse the rest of the request was read from).
  if (nlohmann::json(value) != parsed) return nlohmann::ordered_json(parsed);
  return value;
}

}  // namespace tandem::frontend
