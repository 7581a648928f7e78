#include "coordinator/scheduler/stop_string_matcher.h"

#include <algorithm>
#include <utility>

namespace tandem::sched {

size_t IncompleteUtf8Suffix(std::string_view s) {
  // Walk back over at most 3 continuation bytes (10xxxxxx) to a lead byte.
  const size_t n = s.size();
  size_t k = 0;
  while (k < n && k < 3 &&
         (static_cast<unsigned char>(s[n - 1 - k]) & 0xC0) == 0x80)
    ++k;
  if (k == n) return 0;  // only continuation bytes: nothing can complete them
  const unsigned char lead = static_cast<unsigned char>(s[n - 1 - k]);
  size_t want;
  if (lead < 0x80) {
    return 0;  // ASCII: complete (any continuation bytes after it are stray)
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    want = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    want = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    want = 4;
  } else {
    return 0;  // not a lead byte: invalid, holding it back cannot help
  }
  return k + 1 < want ? k + 1 : 0;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings,
                                     bool include_stop_string)
    : include_stop_(include_stop_string) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stops_.push_back(std::move(stop_strings[i]));
    stop_ids_.push_back(static_cast<int>(i));
  }
}

std::string_view StopStringMatcher::matched() const {
  if (stop_index_ < 0) return {};
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stop_ids_[i] == stop_index_) return stops_[i];
  }
  return {};
}

size_t StopStringMatcher::PartialStopSuffix(std::string_view s) const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    // Longest k < |stop| with s ending in stop[0, k).
    for (size_t k = std::min(stop.size() - 1, s.size()); k > best; --k) {
      if (s.substr(s.size() - k) == std::string_view(stop).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

std::string StopStringMatcher::Push(std::string_view delta) {
  if (stopped()) return {};
  // pending_ holds no whole stop string and no stop string starts in the
  // released text (it would end in pending_ and be a partial suffix), so a
  // new match lies within pending_ + delta.
  pending_.append(delta);
  size_t best_pos = std::string::npos;
  size_t best = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = pending_.find(stops_[i]);
    if (pos < best_pos) {
      best_pos = pos;
      best = i;
    }
  }
  if (best_pos != std::string::npos) {
    const size_t end = best_pos + (include_stop_ ? stops_[best].size() : 0);
    std::string out = pending_.substr(0, end);
    released_ += out;
    pending_.clear();
    stop_index_ = stop_ids_[best];
    return out;
  }
  const size_t hold =
      std::max(PartialStopSuffix(pending_), IncompleteUtf8Suffix(pending_));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  released_ += out;
  return out;
}

std::string StopStringMatcher::Flush() {
  if (stopped()) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  released_ += out;
  return out;
}

}  // namespace tandem::sched
