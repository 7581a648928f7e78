// The devices the device tests run on: the host device and the host device
// posing as one with its own memory (separate_memory_device.h) always, and
// where Tandem is built with CUDA, the CUDA device of every visible GPU.
#ifndef TANDEM_GPU_WORKER_ENGINE_TESTING_TEST_DEVICES_H_
#define TANDEM_GPU_WORKER_ENGINE_TESTING_TEST_DEVICES_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu_worker/engine/device.h"

namespace tandem::testing {

struct TestDevice {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Device>>()> make;
};

// Host first. `why_no_gpu`, if given, says why no GPU device is listed
// (empty if one is).
std::vector<TestDevice> TestDevices(std::string* why_no_gpu = nullptr);

// TestDevices(), saying on stdout why no GPU is among them when none is
// (so a log shows which devices a passing test covered).
inline std::vector<TestDevice> TestDevicesNoting() {
  std::string why;
  std::vector<TestDevice> d = TestDevices(&why);
  if (!why.empty()) std::printf("no GPU device checked: %s\n", why.c_str());
  return d;
}

// True for a device whose results match the host's only within bf16
// rounding (a GPU); the host ones match to the bit or to f32 rounding.
inline bool IsGpu(const TestDevice& d) { return d.name.rfind("cuda", 0) == 0; }

}  // namespace tandem::testing

#endif  // TANDEM_GPU_WORKER_ENGINE_TESTING_TEST_DEVICES_H_
