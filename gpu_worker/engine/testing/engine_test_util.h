// Small helpers of the engine's device tests: a test model opened as an
// engine, and the relative error between two logit vectors.
#ifndef TANDEM_GPU_WORKER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
#define TANDEM_GPU_WORKER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "gpu_worker/engine/engine.h"
#include "gtest/gtest.h"

namespace tandem::testing {

// tests/data/models/<name> as an engine of 2 sequences of 64 tokens with
// `o`'s other options; null (and a test failure) if it does not open.
inline std::unique_ptr<Engine> OpenTestEngine(const std::string& name,
                                              EngineOptions o) {
  auto ckpt =
      Checkpoint::Open(std::string(TANDEM_TESTDATA_DIR) + "/models/" + name);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  o.max_context = 64;
  o.max_sequences = 2;
  auto e = Engine::Create(std::move(*ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// The f32 test models (tests/data/models/*_f32), sorted.
inline std::vector<std::string> F32TestModels() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(
           std::string(TANDEM_TESTDATA_DIR) + "/models", ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n.compare(n.size() - 4, 4, "_f32") == 0)
      names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The largest |a - b| over the largest |b|, over n values.
inline double MaxRelativeError(const float* a, const float* b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    r = std::max(r, std::fabs(static_cast<double>(b[i])));
  }
  return d / std::max(r, 1e-30);
}

// The largest |a - b| over the largest |b| (sizes must agree).
inline double MaxRelativeError(const std::vector<float>& a,
                               const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return MaxRelativeError(a.data(), b.data(), std::min(a.size(), b.size()));
}

}  // namespace tandem::testing

#endif  // TANDEM_GPU_WORKER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
