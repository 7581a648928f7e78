#include "gpu_worker/engine/testing/tp_script.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/status_macros.h"

namespace tandem::testing {
namespace {

constexpr int kDecodeSteps = 4;

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> MakeTpEngine(const std::string& model, AllReduce* ar,
                                                     std::vector<int64_t> streamed) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(model));
  EngineOptions o;
  o.max_context = 64;
  o.max_sequences = 2;
  o.tensor_parallel = ar;
  o.streamed_ffn_layers = std::move(streamed);
  o.stream_page_bytes = 4096;
  return Engine::Create(std::move(ckpt), o);
}

absl::StatusOr<TpScriptResult> RunTpScript(Engine& engine) {
  TpScriptResult r;
  const int64_t vocab = engine.config().vocab_size;
  std::vector<SequenceChunk> batch = {
      {1, {3, 14, 15, 92, 65, 35, 89}, 0, /*all_logits=*/true},
      {2, {27, 18, 28, 18}, 0, /*all_logits=*/false},
  };
  for (SequenceChunk& c : batch) {
    for (int32_t& t : c.tokens) t = static_cast<int32_t>(t % vocab);
  }
  for (int step = 0; step <= kDecodeSteps; ++step) {
    TANDEM_ASSIGN_OR_RETURN(StepResult s, engine.Step(batch));
    r.logits.insert(r.logits.end(), s.logits.begin(), s.logits.end());
    for (size_t i = 0; i < batch.size(); ++i) {
      const int32_t next = Argmax(s.Row(i), vocab);
      r.tokens.push_back(next);
      batch[i].start_pos += static_cast<int64_t>(batch[i].tokens.size());
      batch[i].tokens = {next};
      batch[i].all_logits = false;
    }
  }
  return r;
}

absl::Status WriteTpResult(const TpScriptResult& r, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path));
  const uint64_t sizes[2] = {r.logits.size(), r.tokens.size()};
  bool ok = std::fwrite(sizes, sizeof(sizes), 1, f) == 1;
  ok = ok && std::fwrite(r.logits.data(), 4, r.logits.size(), f) == r.logits.size();
  ok = ok && std::fwrite(r.tokens.data(), 4, r.tokens.size(), f) == r.tokens.size();
  ok = (std::fclose(f) == 0) && ok;
  return ok ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

absl::StatusOr<TpScriptResult> ReadTpResult(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  uint64_t sizes[2] = {0, 0};
  TpScriptResult r;
  bool ok = std::fread(sizes, sizeof(sizes), 1, f) == 1 && sizes[0] < (1u << 28) &&
            sizes[1] < (1u << 20);
  if (ok) {
    r.logits.resize(sizes[0]);
    r.tokens.resize(sizes[1]);
    ok = std::fread(r.logits.data(), 4, sizes[0], f) == sizes[0] &&
         std::fread(r.tokens.data(), 4, sizes[1], f) == sizes[1];
  }
  std::fclose(f);
  if (!ok) return absl::DataLossError(absl::StrCat(path, " is not a whole result"));
  return r;
}

}  // namespace tandem::testing
