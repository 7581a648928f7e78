// Stop strings on streamed text. The frontend feeds each piece of newly
// detokenized text; the matcher releases only text that can no longer turn
// out to be part of a stop string, so a client never sees (any part of) a
// stop string, even one spread over several tokens. It holds back:
//  - the longest suffix that is a proper prefix of some stop string, and
//  - a trailing incomplete UTF-8 sequence (should the input split one), so
//    released pieces are whole characters whenever the input is valid UTF-8.
// Matching is on bytes: UTF-8 is self-synchronising, so a match of a valid
// stop string in valid text always begins and ends on character boundaries.
// The output ends at the first stop string to be completed (generation stops
// then; later text cannot change that). If one push completes several, the
// one starting earliest wins (ties: the earlier in the list). On a match the
// request should be finished with
// FinishReason::kStop; text() is then the final output, cut before the stop
// string (or just after it with include_stop_string).
#ifndef TANDEM_COORDINATOR_SCHEDULER_STOP_STRING_MATCHER_H_
#define TANDEM_COORDINATOR_SCHEDULER_STOP_STRING_MATCHER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::sched {

class StopStringMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings,
                             bool include_stop_string = false);

  // Appends `delta` to the output; returns the text that may be streamed now
  // (possibly empty). After a stop, returns "" and ignores further input.
  std::string Push(std::string_view delta);
  // End of generation for another reason (EOS, length, abort): releases
  // whatever is held back. "" after a stop.
  std::string Flush();

  bool stopped() const { return stop_index_ >= 0; }
  // Index into the stop strings given to the constructor, -1 if none matched.
  int stop_index() const { return stop_index_; }
  // The matched stop string, "" if none.
  std::string_view matched() const;
  // All text released so far. After a stop or Flush(), the final output.
  const std::string& text() const { return released_; }
  // Bytes pushed but not yet released.
  size_t num_held_bytes() const { return pending_.size(); }

 private:
  // Length of the longest suffix of `s` that is a proper prefix of a stop
  // string.
  size_t PartialStopSuffix(std::string_view s) const;

  std::vector<std::string> stops_;
  std::vector<int> stop_ids_;  // constructor index of each entry of stops_
  bool include_stop_;
  std::string pending_;   // held back
  std::string released_;  // streamed so far
  int stop_index_ = -1;
};

// Length of a trailing incomplete UTF-8 sequence of `s` (0 if `s` ends on a
// character boundary, or in bytes that can never become valid).
size_t IncompleteUtf8Suffix(std::string_view s);

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_STOP_STRING_MATCHER_H_
