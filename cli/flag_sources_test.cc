#include "cli/flag_sources.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "cli/flag_environment.h"
#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

class FlagSourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sub_ = app_.add_subcommand("serve", "");
    sub_->add_option("--model,-m", model_);
    sub_->add_option("--port", port_);
    sub_->add_option("--port-file", port_file_);
    sub_->add_option("--max-num-seqs", seqs_);
    BindFlagsToEnvironment(app_);
  }
  void TearDown() override {
    for (const char* v : {"TANDEM_ARG_MODEL", "TANDEM_ARG_PORT", "TANDEM_ARG_PORT_FILE",
                          "TANDEM_ARG_MAX_NUM_SEQS"}) {
      unsetenv(v);
    }
  }

  CLI::App app_{"test"};
  CLI::App* sub_ = nullptr;
  std::string model_, port_file_;
  int port_ = 0, seqs_ = 0;
};

TEST_F(FlagSourcesTest, VariablesAndTheConfigFileAreSourcesTheCommandLineIsNot) {
  setenv("TANDEM_ARG_MODEL", "/m", 1);        // but -m is on the command line
  setenv("TANDEM_ARG_PORT", "x", 1);          // from the environment
  setenv("TANDEM_ARG_MAX_NUM_SEQS", "0", 1);  // from the config file
  const std::vector<FlagSource> sources =
      FindFlagSources(*sub_, {"serve", "-m", "/other"}, "/etc/t.yaml", {"TANDEM_ARG_MAX_NUM_SEQS"});
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].flag, "--port");
  EXPECT_EQ(sources[0].value, "x");
  EXPECT_EQ(sources[0].origin, "TANDEM_ARG_PORT");
  EXPECT_EQ(sources[1].flag, "--max-num-seqs");
  EXPECT_EQ(sources[1].origin, "--config /etc/t.yaml");

  // --model=... and --port given on the command line are no sources.
  EXPECT_TRUE(
      FindFlagSources(*sub_, {"serve", "--model=/o", "--port", "1", "--max-num-seqs=2"}, "", {})
          .empty());
}

TEST_F(FlagSourcesTest, OnlyTheFlagsAMessageNamesAreExplained) {
  const std::vector<FlagSource> sources = {{"--port", "x", "TANDEM_ARG_PORT"},
                                           {"--max-num-seqs", "0", "--config /etc/t.yaml"}};
  EXPECT_EQ(ExplainFlagSources("tandem serve", "--max-num-seqs and --x must be > 0", sources),
            "tandem serve: --max-num-seqs=0 was set by --config /etc/t.yaml\n");
  EXPECT_EQ(ExplainFlagSources("tandem", "Could not convert: --port = x", sources),
            "tandem: --port=x was set by TANDEM_ARG_PORT\n");
  // --port-file is another flag; --port_x too.
  EXPECT_EQ(ExplainFlagSources("t", "--port-file: cannot write; --port_x", sources), "");
  EXPECT_EQ(ExplainFlagSources("t", "no flags at all", sources), "");
}

}  // namespace
}  // namespace tandem::cli
