// A host device that says its memory is not the host's: the engine then
// takes the paths a GPU needs (logits, offloaded expert rows and CPU
// attention rows through CopyToHost / CopyToDevice), and they run, and are
// tested, on machines without a GPU, with the host kernels' results to
// compare against bit for bit.
#ifndef TANDEM_GPU_WORKER_ENGINE_TESTING_SEPARATE_MEMORY_DEVICE_H_
#define TANDEM_GPU_WORKER_ENGINE_TESTING_SEPARATE_MEMORY_DEVICE_H_

#include <string>

#include "gpu_worker/host/host_device.h"

namespace tandem::testing {

class SeparateMemoryDevice final : public HostDevice {
 public:
  std::string name() const override { return "host-separate-memory"; }
  bool host_memory() const override { return false; }
};

}  // namespace tandem::testing

#endif  // TANDEM_GPU_WORKER_ENGINE_TESTING_SEPARATE_MEMORY_DEVICE_H_
