// Renders every golden case of tests/data/chat_templates/ (written by
// tests/golden/make_chat_template_goldens.py from transformers + jinja2) and
// compares byte for byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDir = std::string(TANDEM_TESTDATA_DIR) + "/chat_templates";

Json Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return Json::parse(ss.str());
}

std::vector<std::string> ModelFiles() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    if (e.path().extension() == ".json" &&
        e.path().filename() != "features.json") {
      out.push_back(e.path().stem().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The inputs of apply_chat_template -> ChatTemplateInputs.
ChatTemplateInputs ToInputs(const Json& in) {
  ChatTemplateInputs r;
  for (const Json& m : in["messages"]) {
    ChatMessage msg;
    bool first = true;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role") {
        msg.role = it.value().get<std::string>();
      } else if (it.key() == "content" && it.value().is_string() && first) {
        msg.content = it.value().get<std::string>();
      } else {
        msg.extra[it.key()] = it.value();
      }
      if (it.key() != "role") first = false;
    }
    r.messages.push_back(std::move(msg));
  }
  r.add_generation_prompt = in["add_generation_prompt"].get<bool>();
  const Json& sp = in["special_tokens"];
  auto tok = [&sp](const char* k) -> std::optional<std::string> {
    if (!sp.contains(k)) return std::nullopt;
    return sp[k].get<std::string>();
  };
  r.bos_token = tok("bos_token");
  r.eos_token = tok("eos_token");
  r.unk_token = tok("unk_token");
  r.sep_token = tok("sep_token");
  r.pad_token = tok("pad_token");
  r.cls_token = tok("cls_token");
  r.mask_token = tok("mask_token");
  r.tools = in["tools"];
  r.documents = in["documents"];
  r.extra_kwargs = in["kwargs"];
  return r;
}

// Every case of one golden file: the rendered text (or the error), the
// variables BuildChatContext gives the template, and Apply on the inputs.
void CheckGoldenFile(const std::string& path, const std::string& label) {
  const Json golden = Load(path);
  auto tmpl = ChatTemplate::Parse(golden["template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  int rendered = 0, errors = 0;
  for (const Json& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(label + ": " + name);
    auto out = tmpl->Render(c["context"]);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
      ++rendered;
    } else {
      ASSERT_FALSE(out.ok())
          << "expected " << c["error"].dump() << ", got: " << *out;
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      if (c["error"]["type"] == "TemplateError") {  // raise_exception(message)
        EXPECT_THAT(
            std::string(out.status().message()),
            ::testing::HasSubstr(c["error"]["message"].get<std::string>()));
      }
      ++errors;
    }
    // BuildChatContext gives the template the same variables transformers does.
    const Json built = BuildChatContext(ToInputs(c["inputs"]));
    const Json& want = c["context"];
    EXPECT_EQ(built.size(), want.size()) << built.dump();
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(built.contains(it.key())) << it.key();
      EXPECT_EQ(built[it.key()], it.value()) << it.key();
    }
    auto applied = tmpl->Apply(ToInputs(c["inputs"]));
    EXPECT_EQ(applied.ok(), out.ok());
    if (applied.ok() && out.ok()) EXPECT_EQ(*applied, *out);
  }
  EXPECT_GT(rendered, 0);
  ::testing::Test::RecordProperty("rendered", rendered);
  ::testing::Test::RecordProperty("errors", errors);
}

class ModelTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTemplateGolden, MatchesTransformers) {
  CheckGoldenFile(kDir + "/" + GetParam() + ".json", GetParam());
}

// Random conversations (tests/golden/make_random_chat_template_goldens.py):
// text of every script with Jinja-looking markup, badly ordered turns, tool
// calls with every JSON type in their arguments, reasoning fields.
TEST_P(ModelTemplateGolden, MatchesTransformersOnRandomConversations) {
  CheckGoldenFile(kDir + "/random/" + GetParam() + ".json", GetParam() + " (random)");
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, ModelTemplateGolden,
                         ::testing::ValuesIn(ModelFiles()),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplateGolden, CoversTheSupportedModels) {
  const std::vector<std::string> files = ModelFiles();
  for (const char* want : {"smollm2", "qwen3", "llama2", "llama3", "llama31",
                           "mixtral", "qwen2", "qwen25", "olmoe"}) {
    EXPECT_NE(std::find(files.begin(), files.end(), want), files.end()) << want;
  }
}

TEST(ChatTemplateGolden, TemplateFilesMatchTheGoldens) {
  // templates/*.jinja are the inputs of the golden script; the JSON embeds
  // them.
  for (const std::string& name : ModelFiles()) {
    const Json golden = Load(kDir + "/" + name + ".json");
    std::ifstream f(kDir + "/templates/" + name + ".jinja", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), golden["template"].get<std::string>()) << name;
  }
}

TEST(ChatTemplateGolden, Features) {
  const Json golden = Load(kDir + "/features.json");
  const Json& context = golden["context"];
  int n = 0;
  for (const Json& c : golden["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name + ": " + c["template"].get<std::string>());
    auto tmpl = ChatTemplate::Parse(c["template"].get<std::string>());
    if (c.contains("expected")) {
      ASSERT_TRUE(tmpl.ok()) << tmpl.status();
      auto out = tmpl->Render(context);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else if (c["error"]["phase"] == "parse") {
      ASSERT_FALSE(tmpl.ok()) << "jinja2: " << c["error"].dump();
      EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(tmpl.status().message()),
                  ::testing::HasSubstr("line 1, column"));
    } else {
      ASSERT_TRUE(tmpl.ok()) << tmpl.status();
      auto out = tmpl->Render(context);
      ASSERT_FALSE(out.ok())
          << "jinja2: " << c["error"].dump() << " but rendered: " << *out;
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      if (c["error"]["type"] == "TemplateError") {
        EXPECT_THAT(
            std::string(out.status().message()),
            ::testing::HasSubstr(c["error"]["message"].get<std::string>()));
      }
    }
    ++n;
  }
  EXPECT_GT(n, 150);
}

}  // namespace
}  // namespace tandem
