// The HTTP frontend's GenerationBackend over the step driver: converts the
// frontend's requests and options, maps the driver's events back, and keeps
// the frontend's string ids for Cancel.
#ifndef TANDEM_COORDINATOR_SERVICE_FRONTEND_BACKEND_H_
#define TANDEM_COORDINATOR_SERVICE_FRONTEND_BACKEND_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/service/step_driver.h"

namespace tandem::coord {

class FrontendBackend : public frontend::GenerationBackend {
 public:
  explicit FrontendBackend(StepDriver* driver) : driver_(driver) {}

  // kInvalidArgument for options the samplers do not implement (min_p,
  // penalties, prompt log-probs); the frontend answers 400.
  absl::Status Submit(frontend::GenerationRequest request,
                      frontend::EventCallback on_event) override;
  void Cancel(const std::string& request_id) override;
  bool Ready() const override { return driver_->ready(); }
  int64_t max_context() const override { return driver_->max_context(); }

 private:
  StepDriver* driver_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> cancelled_early_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_FRONTEND_BACKEND_H_
