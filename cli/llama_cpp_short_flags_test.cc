#include "cli/llama_cpp_short_flags.h"

#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

TEST(LlamaCppShortFlags, AreRewrittenToTheirLongNames) {
  std::vector<std::string> args = {"serve",  "-m", "/m.gguf",           "-ot",  "exps=CPU", "-cmoe",
                                   "-ncmoe", "4",  "-ot=blk\\.1=CUDA0", "-ngl", "99"};
  RewriteLlamaCppShortFlags(&args);
  EXPECT_EQ(args,
            (std::vector<std::string>{"serve", "-m", "/m.gguf", "--override-tensor", "exps=CPU",
                                      "--cpu-moe", "--n-cpu-moe", "4",
                                      "--override-tensor=blk\\.1=CUDA0", "--n-gpu-layers", "99"}));
  // Other arguments, and look-alikes, are left as they are.
  std::vector<std::string> other = {"serve", "-o", "--ot", "-otx", "-m"};
  RewriteLlamaCppShortFlags(&other);
  EXPECT_EQ(other, (std::vector<std::string>{"serve", "-o", "--ot", "-otx", "-m"}));
}

}  // namespace
}  // namespace tandem::cli
