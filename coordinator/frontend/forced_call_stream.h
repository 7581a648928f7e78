// The tool calls of a forced answer (tool_choice "required" or a named
// function) read as the answer streams, so that a client sees each call
// as soon as its tool is named and its arguments as they are written,
// the way OpenAI streams calls.
//
// The answer is held by its JSON Schema to [{"name": "...", "parameters":
// {...}}, ...] (chat_parser.cc), the name first. The reader follows the
// JSON's structure byte by byte (strings, escapes, nesting) and gives, per
// call, a first piece with its id and name, then the parameters' text as
// it comes: verbatim but for the whitespace between tokens, which is
// dropped. The arguments of a whole answer (ParseForcedCalls) are the same
// text, so a streamed answer's pieces add up to the answer given whole.
// Text that is not of that shape (it cannot be, under the schema) stops
// the reader: nothing more comes out of it and it is not complete.
#ifndef TANDEM_COORDINATOR_FRONTEND_FORCED_CALL_STREAM_H_
#define TANDEM_COORDINATOR_FRONTEND_FORCED_CALL_STREAM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/frontend/tool_call_formats.h"

namespace tandem::frontend {

// A piece of a streamed tool call (a delta's "tool_calls" entry).
struct ToolCallDelta {
  int index = 0;
  std::string id;    // on a call's first piece only
  std::string name;  // on a call's first piece only
  std::string arguments;
};

class ForcedCallStream {
 public:
  // Reads the next piece of the answer; the pieces of calls it completes
  // are appended to `out` (a call's arguments since the last piece, in one
  // delta per call).
  void Push(std::string_view text, std::vector<ToolCallDelta>* out);
  // The list has closed: every call is whole.
  bool complete() const { return phase_ == Phase::kDone; }
  bool failed() const { return phase_ == Phase::kFailed; }
  // The calls as far as read (the last may be partial).
  const std::vector<ToolCall>& calls() const { return calls_; }
  // Pieces handed out so far.
  int64_t pieces() const { return pieces_; }

 private:
  enum class Phase : uint8_t {
    kStart,   // before the list's '['
    kInList,  // in the list, between calls
    kInCall,  // in a call object, between members
    kKey,     // in a member's key string
    kColon,   // after a key
    kValue,   // after ':', before the value
    kName,    // in the name's string
    kArgs,    // in the parameters' value
    kSkip,    // in another member's value
    kDone,    // after the list's ']'
    kFailed,  // not a list of calls
  };
  void Step(char c, std::vector<ToolCallDelta>* out);
  // The member's value has ended at depth 2 (in the call object).
  void EndValue();
  // Hands out what call `calls_.back()` has that was not handed out (but
  // for a UTF-8 character not whole yet, unless the call is).
  void Flush(std::vector<ToolCallDelta>* out, bool whole);

  Phase phase_ = Phase::kStart;
  // Inside a string (of any phase), after a backslash.
  bool in_string_ = false;
  bool escaped_ = false;
  int depth_ = 0;        // containers open inside the value being read (kArgs, kSkip)
  bool scalar_ = false;  // kArgs/kSkip: the value is a number or literal
  std::string token_;    // the key or name being read, with its quotes
  std::string key_;      // the current member's key, with its quotes
  std::vector<ToolCall> calls_;
  bool named_ = false;      // calls_.back() has its name
  bool announced_ = false;  // calls_.back()'s first piece is out
  bool had_args_ = false;   // calls_.back() has a parameters member
  size_t sent_ = 0;         // bytes of calls_.back().arguments handed out
  int64_t pieces_ = 0;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_FORCED_CALL_STREAM_H_
