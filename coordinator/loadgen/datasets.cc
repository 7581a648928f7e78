#include "coordinator/loadgen/datasets.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/loadgen/server_exchange.h"

namespace tandem::loadgen {
namespace {

using nlohmann::json;

// Lower-case words of 2-9 letters: text that every tokenizer splits into
// ordinary tokens, at least one per word.
std::string RandomWords(std::mt19937_64& rng, int words) {
  std::string out;
  for (int w = 0; w < words; ++w) {
    if (w > 0) out += ' ';
    const int len = 2 + static_cast<int>(rng() % 8);
    for (int i = 0; i < len; ++i) out += static_cast<char>('a' + rng() % 26);
  }
  return out;
}

int64_t DrawLength(std::mt19937_64& rng, int base, double ratio) {
  const int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(base * (1 - ratio)));
  const int64_t hi = std::max<int64_t>(lo, static_cast<int64_t>(base * (1 + ratio)));
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// The server's token ids of `text` (no special tokens added). The body
// carries vLLM's field and llama.cpp's ("content"); each server ignores the
// other.
absl::StatusOr<std::vector<int64_t>> Tokenize(const ServeBenchmarkOptions& o,
                                              const std::string& text) {
  json req = {{"prompt", text}, {"content", text}, {"add_special_tokens", false}};
  if (!o.model.empty()) req["model"] = o.model;
  TANDEM_ASSIGN_OR_RETURN(json tok, Exchange(o.server, "/tokenize", req));
  if (!tok.contains("tokens") || !tok["tokens"].is_array()) {
    return absl::FailedPreconditionError("/tokenize answered without a list of tokens");
  }
  std::vector<int64_t> ids;
  for (const json& t : tok["tokens"]) {
    if (!t.is_number_integer()) {
      return absl::FailedPreconditionError("/tokenize answered a token that is not an id");
    }
    ids.push_back(t.get<int64_t>());
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::vector<DatasetPrompt>> MakeRandomDataset(const ServeBenchmarkOptions& o) {
  if (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1) {
    return absl::InvalidArgumentError(
        "--num-prompts, --random-input-len and --random-output-len must be >= 1");
  }
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-range-ratio must be in [0, 1), got ", o.range_ratio));
  }
  if (o.prefix_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-prefix-len must be >= 0, got ", o.prefix_len));
  }
  std::mt19937_64 rng(o.seed);
  // `n` ids of random words, as the server tokenizes them.
  auto random_ids = [&](int64_t n) -> absl::StatusOr<std::vector<int64_t>> {
    TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> all,
                            Tokenize(o, RandomWords(rng, static_cast<int>(n))));
    if (static_cast<int64_t>(all.size()) < n) {
      return absl::FailedPreconditionError(
          absl::StrCat("/tokenize gave fewer than ", n, " tokens for ", n, " words"));
    }
    all.resize(static_cast<size_t>(n));
    return all;
  };
  std::vector<int64_t> prefix;
  if (o.prefix_len > 0) {  // drawn first only when asked: other datasets keep their seeds
    TANDEM_ASSIGN_OR_RETURN(prefix, random_ids(o.prefix_len));
  }
  std::vector<DatasetPrompt> out;
  out.reserve(static_cast<size_t>(o.num_prompts));
  for (int i = 0; i < o.num_prompts; ++i) {
    DatasetPrompt p;
    p.input_len = DrawLength(rng, o.input_len, o.range_ratio);
    p.output_len = DrawLength(rng, o.output_len, o.range_ratio);
    TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> own, random_ids(p.input_len));
    json ids(prefix);
    for (int64_t id : own) ids.push_back(id);
    p.input_len += o.prefix_len;
    if (o.endpoint == ApiEndpoint::kCompletions) {
      p.prompt = std::move(ids);
    } else {
      json dreq = {{"tokens", ids}};
      if (!o.model.empty()) dreq["model"] = o.model;
      TANDEM_ASSIGN_OR_RETURN(json detok, Exchange(o.server, "/detokenize", dreq));
      // vLLM answers "prompt", llama.cpp "content".
      const auto text = detok.contains("prompt") ? detok.find("prompt") : detok.find("content");
      if (text == detok.end() || !text->is_string()) {
        return absl::FailedPreconditionError("/detokenize answered without the text");
      }
      p.prompt = text->get<std::string>();
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::vector<DatasetPrompt>> MakeShareGptDataset(const ServeBenchmarkOptions& o) {
  if (o.dataset_path.empty()) {
    return absl::InvalidArgumentError("--dataset-name sharegpt needs --dataset-path FILE");
  }
  std::ifstream in(o.dataset_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--dataset-path ", o.dataset_path, ": cannot read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  const json data = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!data.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset-path ", o.dataset_path, ": not a ShareGPT file (a JSON list of conversations)"));
  }
  // (prompt, reply) of each conversation with two turns of text at least.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const json& entry : data) {
    if (!entry.is_object()) continue;
    const auto turns = entry.find("conversations");
    if (turns == entry.end() || !turns->is_array() || turns->size() < 2) continue;
    const json& a = (*turns)[0];
    const json& b = (*turns)[1];
    if (!a.is_object() || !b.is_object() || !a.contains("value") || !b.contains("value") ||
        !a["value"].is_string() || !b["value"].is_string()) {
      continue;
    }
    pairs.emplace_back(a["value"].get<std::string>(), b["value"].get<std::string>());
  }
  std::mt19937_64 rng(o.seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  std::vector<DatasetPrompt> out;
  for (const auto& [prompt, reply] : pairs) {
    if (static_cast<int>(out.size()) == o.num_prompts) break;
    TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> prompt_ids, Tokenize(o, prompt));
    int64_t output_len = o.sharegpt_output_len;
    if (output_len <= 0) {
      TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> reply_ids, Tokenize(o, reply));
      output_len = static_cast<int64_t>(reply_ids.size());
    }
    const int64_t input_len = static_cast<int64_t>(prompt_ids.size());
    if (input_len < 4 || output_len < 4) continue;                    // too short to measure
    if (input_len > 1024 || input_len + output_len > 2048) continue;  // too long
    DatasetPrompt p;
    p.prompt = prompt;
    p.input_len = input_len;
    p.output_len = output_len;
    out.push_back(std::move(p));
  }
  if (static_cast<int>(out.size()) < o.num_prompts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset-path ", o.dataset_path, ": ", out.size(), " usable conversations of the ",
        o.num_prompts, " asked for (", pairs.size(), " in the file)"));
  }
  return out;
}

absl::StatusOr<std::vector<DatasetPrompt>> MakeDataset(const ServeBenchmarkOptions& o) {
  if (o.dataset_name == "random") return MakeRandomDataset(o);
  if (o.dataset_name == "sharegpt") return MakeShareGptDataset(o);
  return absl::InvalidArgumentError(
      absl::StrCat("--dataset-name ", o.dataset_name, ": random or sharegpt"));
}

}  // namespace tandem::loadgen
