#include "common/tokenizer/normalizer.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/unicode.h"

namespace tandem::tok {

std::unique_ptr<Normalizer> Normalizer::Identity() {
  return std::unique_ptr<Normalizer>(new Normalizer());
}

void Normalizer::AddPrepend(std::string text) {
  Step s;
  s.kind = Step::kPrepend;
  s.a = std::move(text);
  steps_.push_back(std::move(s));
}

void Normalizer::AddReplace(std::string from, std::string to) {
  Step s;
  s.kind = Step::kReplace;
  s.a = std::move(from);
  s.b = std::move(to);
  steps_.push_back(std::move(s));
}

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(
    const nlohmann::json& j) {
  auto n = Identity();
  if (!j.is_null()) TANDEM_RETURN_IF_ERROR(n->AddFromJson(j));
  return n;
}

absl::Status Normalizer::AddFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(
        "normalizer must be an object with a string \"type\"");
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  Step step;
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          "Sequence normalizer needs a \"normalizers\" array");
    }
    for (const auto& sub : *it) TANDEM_RETURN_IF_ERROR(AddFromJson(sub));
    return absl::OkStatus();
  } else if (type == "NFC") {
    step.kind = Step::kNfc;
  } else if (type == "NFD") {
    step.kind = Step::kNfd;
  } else if (type == "NFKC") {
    step.kind = Step::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Step::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Step::kLowercase;
  } else if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return absl::InvalidArgumentError(
          "Prepend normalizer needs a string \"prepend\"");
    }
    step.kind = Step::kPrepend;
    step.a = j["prepend"].get<std::string>();
  } else if (type == "Replace") {
    if (!j.contains("content") || !j["content"].is_string() ||
        !j.contains("pattern") || !j["pattern"].is_object()) {
      return absl::InvalidArgumentError(
          "Replace normalizer needs \"pattern\" and \"content\"");
    }
    step.kind = Step::kReplace;
    step.b = j["content"].get<std::string>();
    const auto& pat = j["pattern"];
    if (pat.contains("String") && pat["String"].is_string()) {
      step.a = pat["String"].get<std::string>();
      if (step.a.empty())
        return absl::InvalidArgumentError("Replace with an empty pattern");
    } else if (pat.contains("Regex") && pat["Regex"].is_string()) {
      TANDEM_ASSIGN_OR_RETURN(step.regex,
                              Regex::Create(pat["Regex"].get<std::string>()));
    } else {
      return absl::InvalidArgumentError(
          "Replace.pattern must hold a \"String\" or \"Regex\"");
    }
  } else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.left = JsonBool(j, "strip_left", true);
    step.right = JsonBool(j, "strip_right", true);
  } else {
    return absl::UnimplementedError(
        absl::StrCat("normalizer type '", type, "' is not supported"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

namespace {

void ReplaceAll(const std::string& from, const std::string& to,
                std::string* text) {
  if (text->find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text->find(from, pos);
    if (hit == std::string::npos) break;
    out.append(*text, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

void Strip(bool left, bool right, std::string* text) {
  size_t b = 0, e = text->size();
  if (left) {
    while (b < e) {
      const Utf8Step st = Utf8At(*text, b);
      if (st.kind != Utf8Step::kValid || !IsWhitespace(st.cp)) break;
      b += st.len;
    }
  }
  if (right) {
    while (e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<uint8_t>((*text)[s]) & 0xC0) == 0x80) --s;
      const Utf8Step st = Utf8At(*text, s);
      if (st.kind != Utf8Step::kValid || !IsWhitespace(st.cp)) break;
      e = s;
    }
  }
  *text = text->substr(b, e - b);
}

}  // namespace

void Normalizer::Apply(std::string* text) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::kNfc:
        *text = Normalize(*text, NormalForm::kNfc);
        break;
      case Step::kNfd:
        *text = Normalize(*text, NormalForm::kNfd);
        break;
      case Step::kNfkc:
        *text = Normalize(*text, NormalForm::kNfkc);
        break;
      case Step::kNfkd:
        *text = Normalize(*text, NormalForm::kNfkd);
        break;
      case Step::kLowercase:
        *text = ToLower(*text);
        break;
      case Step::kPrepend:
        if (!text->empty()) text->insert(0, s.a);
        break;
      case Step::kReplace:
        if (s.regex == nullptr) {
          ReplaceAll(s.a, s.b, text);
        } else {
          std::vector<std::pair<size_t, size_t>> m;
          s.regex->FindAll(*text, &m);
          if (m.empty()) break;
          std::string out;
          size_t pos = 0;
          for (const auto& [b, e] : m) {
            out.append(*text, pos, b - pos);
            out += s.b;
            pos = e;
          }
          out.append(*text, pos, std::string::npos);
          *text = std::move(out);
        }
        break;
      case Step::kStrip:
        Strip(s.left, s.right, text);
        break;
    }
  }
}

}  // namespace tandem::tok
