// Discovery of CUDA devices. On a machine without a GPU (or a driver) it
// reports none instead of failing, so callers and tests can skip cleanly.
#ifndef TANDEM_GPU_WORKER_CUDA_DEVICE_INFO_H_
#define TANDEM_GPU_WORKER_CUDA_DEVICE_INFO_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int64_t total_memory = 0;
};

// Visible devices; empty when no GPU or driver is present. `why_none` (if
// given) receives the runtime's reason then.
std::vector<DeviceInfo> ListDevices(std::string* why_none = nullptr);

// True if `devices` holds the one the runtime numbers `index`. By index,
// not position: ListDevices leaves out a device whose properties cannot be
// read, and the ones after it keep their own indexes.
inline bool Lists(const std::vector<DeviceInfo>& devices, int index) {
  return std::any_of(devices.begin(), devices.end(),
                     [index](const DeviceInfo& d) { return d.index == index; });
}

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_DEVICE_INFO_H_
