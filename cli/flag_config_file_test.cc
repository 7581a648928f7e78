#include "cli/flag_config_file.h"

#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli/flag_environment.h"
#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

using Items = std::vector<std::pair<std::string, std::string>>;

TEST(FlagConfigFile, ParsesFlatYaml) {
  auto items = ParseFlagConfig(
      "---\n"
      "# a comment\n"
      "model: /models/Mixtral 8x7B   # trailing comment\n"
      "max_num_seqs: 32\r\n"
      "\n"
      "--port: 9000\n"
      "neo-sub-batches: yes\n"
      "gpu-experts-only: Off\n"
      "api-key: \"a \\\"quoted\\\" #key\"\n"
      "chat-template: '/t/x.jinja'  # single quotes\n"
      "served-model-name: url#fragment\n",
      "c.yaml");
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(*items, (Items{{"model", "/models/Mixtral 8x7B"},
                           {"max-num-seqs", "32"},
                           {"port", "9000"},
                           {"neo-sub-batches", "true"},
                           {"gpu-experts-only", "false"},
                           {"api-key", "a \"quoted\" #key"},
                           {"chat-template", "/t/x.jinja"},
                           {"served-model-name", "url#fragment"}}));
}

TEST(FlagConfigFile, RefusesWhatIsNotAFlagValueNamingTheLine) {
  const std::pair<const char*, const char*> bad[] = {
      {"port: 1\nport: 2\n", "line 2: 'port' is given twice"},
      {"model:\n", "line 1: the key has no value"},
      {"model: ~\n", "no value"},
      {"model: [a, b]\n", "lists"},
      {"model: {a: 1}\n", "mappings"},
      {"model: x\n  nested: 1\n", "line 2: nested"},
      {"- item\n", "list item"},
      {"just text\n", "expected 'flag: value'"},
      {"api-key: \"open\n", "not closed"},
      {"api-key: 'a' b\n", "after the quoted value"},
      {": x\n", "without a key"},
  };
  for (const auto& [text, want] : bad) {
    auto items = ParseFlagConfig(text, "c.yaml");
    ASSERT_FALSE(items.ok()) << text;
    EXPECT_EQ(items.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(items.status().message().find(want), std::string::npos) << items.status();
    EXPECT_NE(items.status().message().find("c.yaml"), std::string::npos) << items.status();
  }
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    app_.add_subcommand("serve");
    CLI::App* s = app_.get_subcommand("serve");
    s->add_option("--model,-m", model_);
    s->add_option("--port", port_);
    s->add_option("--tensor-parallel,--tp", tp_);
    AddConfigFlag(app_);
    path_ = ::testing::TempDir() + "/flag_config_file_test.yaml";
  }
  void TearDown() override {
    for (const char* v : {"TANDEM_ARG_MODEL", "TANDEM_ARG_PORT", "TANDEM_ARG_TENSOR_PARALLEL"}) {
      unsetenv(v);
    }
  }
  void Write(const std::string& text) { std::ofstream(path_) << text; }

  CLI::App app_;
  std::string model_, path_;
  int port_ = 0, tp_ = 1;
};

TEST_F(ConfigFileTest, SetsTheVariablesOfUnsetFlagsAndTakesTheFlagOut) {
  Write("model: /m\nport: 9000\ntp: 2\n");
  setenv("TANDEM_ARG_PORT", "7000", 1);  // the environment wins over the file
  std::vector<std::string> args = {"serve", "--config", path_, "--port", "1"};
  ASSERT_TRUE(ApplyConfigFile(app_, &args).ok());
  EXPECT_EQ(args, (std::vector<std::string>{"serve", "--port", "1"}));
  EXPECT_STREQ(getenv("TANDEM_ARG_MODEL"), "/m");
  EXPECT_STREQ(getenv("TANDEM_ARG_PORT"), "7000");
  EXPECT_STREQ(getenv("TANDEM_ARG_TENSOR_PARALLEL"), "2");  // an alias names its flag

  std::vector<std::string> eq = {"serve", "--config=" + path_};
  ASSERT_TRUE(ApplyConfigFile(app_, &eq).ok());
  EXPECT_EQ(eq, (std::vector<std::string>{"serve"}));
}

TEST_F(ConfigFileTest, ErrorsChangeNothing) {
  Write("model: /m\nnot-a-flag: 1\n");
  std::vector<std::string> args = {"serve", "--config", path_};
  absl::Status s = ApplyConfigFile(app_, &args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'not-a-flag' is not a flag of tandem serve"), std::string::npos) << s;
  EXPECT_EQ(getenv("TANDEM_ARG_MODEL"), nullptr);

  std::vector<std::string> missing = {"serve", "--config", path_ + ".nope"};
  EXPECT_EQ(ApplyConfigFile(app_, &missing).code(), absl::StatusCode::kNotFound);
  std::vector<std::string> twice = {"serve", "--config", path_, "--config", path_};
  EXPECT_EQ(ApplyConfigFile(app_, &twice).code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> bare = {"serve", "--config"};
  EXPECT_EQ(ApplyConfigFile(app_, &bare).code(), absl::StatusCode::kInvalidArgument);
  // Without --config, or for no known subcommand, nothing happens.
  std::vector<std::string> none = {"serve", "--port", "1"};
  EXPECT_TRUE(ApplyConfigFile(app_, &none).ok());
  std::vector<std::string> other = {"bogus", "--config", path_};
  EXPECT_TRUE(ApplyConfigFile(app_, &other).ok());
  EXPECT_EQ(other.size(), 3u);
}

// A flag with a negated name (vLLM's --no-enable-prefix-caching): either
// name may be a key, and the flag ends up as the file says.
TEST(FlagConfigFile, ANegatedFlagNameSetsTheFlagOff) {
  const std::pair<const char*, bool> cases[] = {
      {"no-enable-prefix-caching: true\n", false},
      {"no-enable-prefix-caching: false\n", true},
      {"enable-prefix-caching: false\n", false},
      {"enable-prefix-caching: yes\n", true},
  };
  const std::string path = ::testing::TempDir() + "/flag_config_negated.yaml";
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text);
    CLI::App app;
    bool on = !want;
    app.add_subcommand("serve")->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                                          on);
    AddConfigFlag(app);
    BindFlagsToEnvironment(app);
    std::ofstream(path) << text;
    std::vector<std::string> args = {"serve", "--config", path};
    ASSERT_TRUE(ApplyConfigFile(app, &args).ok());
    std::vector<std::string> argv = {"tandem"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<const char*> c;
    for (const std::string& a : argv) c.push_back(a.c_str());
    ASSERT_NO_THROW(app.parse(static_cast<int>(c.size()), c.data()));
    EXPECT_EQ(on, want);
    unsetenv("TANDEM_ARG_ENABLE_PREFIX_CACHING");
  }
}

// `tandem bench serve --config F`: the nested subcommand's flags are the keys.
TEST(FlagConfigFile, ANestedSubcommandOwnsTheFlagsAfterIt) {
  CLI::App app;
  CLI::App* bench = app.add_subcommand("bench");
  std::string model;
  int prompts = 0;
  bench->add_option("--model", model);
  bench->add_subcommand("serve")->add_option("--num-prompts", prompts);
  AddConfigFlag(app);
  ASSERT_NE(app.get_subcommand("bench")->get_subcommand("serve")->get_option_no_throw("--config"),
            nullptr);
  const std::string path = ::testing::TempDir() + "/flag_config_nested.yaml";
  std::ofstream(path) << "num-prompts: 7\n";
  AppliedConfig applied;
  std::vector<std::string> args = {"bench", "serve", "--config", path};
  ASSERT_TRUE(ApplyConfigFile(app, &args, &applied).ok());
  EXPECT_EQ(args, (std::vector<std::string>{"bench", "serve"}));
  EXPECT_STREQ(getenv("TANDEM_ARG_NUM_PROMPTS"), "7");
  EXPECT_EQ(applied.variables, std::vector<std::string>{"TANDEM_ARG_NUM_PROMPTS"});
  unsetenv("TANDEM_ARG_NUM_PROMPTS");
  // bench's own flag is not serve's.
  std::ofstream(path) << "model: /m\n";
  args = {"bench", "serve", "--config", path};
  const absl::Status s = ApplyConfigFile(app, &args);
  EXPECT_NE(s.message().find("'model' is not a flag of tandem bench serve"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace tandem::cli
