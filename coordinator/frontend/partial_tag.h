// Hold-back for tags that may arrive split across streamed pieces (the
// reasoning splitter's </think>, the tool-call extractor's <tool_call>).
#ifndef TANDEM_COORDINATOR_FRONTEND_PARTIAL_TAG_H_
#define TANDEM_COORDINATOR_FRONTEND_PARTIAL_TAG_H_

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tandem::frontend {

// Length of the longest suffix of `s` that is a proper prefix of `tag`: the
// bytes to hold back until the next piece says whether the tag is there.
inline size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_PARTIAL_TAG_H_
