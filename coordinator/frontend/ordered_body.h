// A request body's values with their objects' keys in the order written.
//
// Bodies are read into nlohmann::json, whose objects keep their keys
// sorted. A JSON Schema's properties are written in the order the schema
// declares them (as OpenAI's structured outputs and vLLM write them), so
// the schemas of a request (response_format, guided_json, the tools'
// parameters) are read again, in order, from the body's text; only
// requests that carry one pay for the second parse.
#ifndef TANDEM_COORDINATOR_FRONTEND_ORDERED_BODY_H_
#define TANDEM_COORDINATOR_FRONTEND_ORDERED_BODY_H_

#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace tandem::frontend {

class OrderedBody {
 public:
  // `text` (the body as received) must outlive this; empty when there is
  // none (a body built in code), and then keys stay sorted.
  explicit OrderedBody(std::string_view text = {}) : text_(text) {}

  // The value at `pointer` (RFC 6901: "/response_format/json_schema/schema")
  // as written. `parsed` is the same value from the sorted parse: it is
  // given back (its keys sorted) when the text is not at hand or does not
  // hold that same value there.
  nlohmann::ordered_json At(const std::string& pointer, const nlohmann::json& parsed) const;

 private:
  std::string_view text_;
  mutable std::optional<nlohmann::ordered_json> doc_;  // parsed on first use
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_ORDERED_BODY_H_
