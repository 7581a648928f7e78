#include "cli/flag_environment.h"

#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

// A command shaped like tandem's: a subcommand with a required option, a
// numeric option with a default, a switch and an option with a short alias.
struct Parsed {
  std::string model;
  int port = 8000;
  bool flag = false;
  std::string host = "127.0.0.1";
};

int Parse(std::vector<std::string> args, Parsed* p, std::string* error = nullptr) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  CLI::App* sub = app.add_subcommand("serve", "");
  sub->add_option("--model,-m", p->model)->required();
  sub->add_option("--port", p->port);
  sub->add_flag("--neo-sub-batches", p->flag);
  sub->add_option("--host", p->host);
  BindFlagsToEnvironment(app);
  std::vector<const char*> argv = {"tandem"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    if (error != nullptr) *error = e.what();
    return e.get_exit_code() == 0 ? -1 : e.get_exit_code();
  }
  return 0;
}

class FlagEnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v :
         {"TANDEM_ARG_MODEL", "TANDEM_ARG_PORT", "TANDEM_ARG_NEO_SUB_BATCHES", "TANDEM_ARG_HOST"}) {
      unsetenv(v);
    }
  }
};

TEST_F(FlagEnvironmentTest, NamesAreTheLongFlagUpperCased) {
  EXPECT_EQ(FlagEnvironmentName("max-num-seqs"), "TANDEM_ARG_MAX_NUM_SEQS");
  EXPECT_EQ(FlagEnvironmentName("model"), "TANDEM_ARG_MODEL");
}

TEST_F(FlagEnvironmentTest, VariablesSetFlagsAndTheCommandLineWins) {
  setenv("TANDEM_ARG_MODEL", "/models/m.gguf", 1);  // satisfies the required flag
  setenv("TANDEM_ARG_PORT", "9001", 1);
  setenv("TANDEM_ARG_NEO_SUB_BATCHES", "true", 1);
  Parsed p;
  ASSERT_EQ(Parse({"serve", "--host", "0.0.0.0"}, &p), 0);
  EXPECT_EQ(p.model, "/models/m.gguf");
  EXPECT_EQ(p.port, 9001);
  EXPECT_TRUE(p.flag);
  EXPECT_EQ(p.host, "0.0.0.0");

  Parsed q;
  ASSERT_EQ(Parse({"serve", "-m", "/other", "--port", "7"}, &q), 0);
  EXPECT_EQ(q.model, "/other");
  EXPECT_EQ(q.port, 7);

  setenv("TANDEM_ARG_NEO_SUB_BATCHES", "0", 1);
  Parsed r;
  ASSERT_EQ(Parse({"serve"}, &r), 0);
  EXPECT_FALSE(r.flag);
}

TEST_F(FlagEnvironmentTest, ABadValueIsAnErrorNamingTheFlag) {
  setenv("TANDEM_ARG_MODEL", "/m", 1);
  setenv("TANDEM_ARG_PORT", "eighty", 1);
  Parsed p;
  std::string error;
  EXPECT_NE(Parse({"serve"}, &p, &error), 0);
  EXPECT_NE(error.find("port"), std::string::npos) << error;
}

TEST_F(FlagEnvironmentTest, WithoutTheVariablesNothingChanges) {
  Parsed p;
  std::string error;
  EXPECT_NE(Parse({"serve"}, &p, &error), 0);  // --model is still required
  EXPECT_NE(error.find("model"), std::string::npos) << error;
  Parsed q;
  ASSERT_EQ(Parse({"serve", "-m", "x"}, &q), 0);
  EXPECT_EQ(q.port, 8000);
}

TEST_F(FlagEnvironmentTest, ChildrenDoNotInheritTheVariables) {
  setenv("TANDEM_ARG_PORT", "9001", 1);
  setenv("TANDEM_ARG_HOST", "0.0.0.0", 1);
  const std::vector<std::string> env = EnvironmentForChildren();
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("TANDEM_ARG_", 0) == 0; }),
            0);
  // Everything else is kept.
  ASSERT_NE(getenv("PATH"), nullptr);
  EXPECT_NE(std::find(env.begin(), env.end(), std::string("PATH=") + getenv("PATH")), env.end());
}

}  // namespace
}  // namespace tandem::cli
