#include "coordinator/frontend/generation_backend.h"

namespace tandem::frontend {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "stop";
}

}  // namespace tandem::frontend
