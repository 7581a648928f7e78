// Smoke test of `tandem bench`: the real command on tiny synthetic models
// with one repeat. Checks that the JSON carries every field, that every
// figure's roofline and fraction follow from its own bytes, FLOPs and the
// measured peaks, that no fraction is an order of magnitude past its
// roofline (a wrong numerator or unit), and that the temporary model is
// gone afterwards. Seconds, not a benchmark. A tighter bound on the
// fraction would test the machine's load, not the code: a 256^3 GEMM peak
// measured once, in a time slice another test took, comes out half what it
// is, and the compute-bound fractions twice. One thread: on a loaded
// machine a second thread that is not scheduled for a time slice turns a
// sub-millisecond bandwidth sweep into a figure ten times too low, and
// every memory-bound fraction ten times too high with it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

// Runs the command, returns its stdout (stderr goes to the test log).
std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

json Bench(const std::string& kind, const std::string& extra, int layers = 2,
           const std::string& env = "", const std::string& batches = "1,4") {
  const std::string cmd = env + std::string(TANDEM_BINARY) + " bench --synthetic " + kind +
                          " --hidden 64 --layers " + std::to_string(layers) +
                          " --intermediate 128 --heads 4 --kv-heads 2"
                          " --vocab 256 --repeats 1 --pp 16,32 --batches " + batches +
                          " --context 16 --tg-tokens 4 --decode-steps 2 --attn-contexts 64,256"
                          " --bandwidth-mib 8 --attn-mib 1 --gemm-size 256 --threads 1 --json " +
                          extra;
  int status = -1;
  const std::string out = RunCommand(cmd, &status);
  EXPECT_EQ(status, 0) << cmd;
  json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

void ExpectSummary(const json& s, const std::string& where) {
  for (const char* k : {"median", "min", "max", "runs"}) {
    EXPECT_TRUE(s.contains(k)) << where << " lacks " << k;
  }
  EXPECT_GT(s.value("median", 0.0), 0) << where;
}

// Relative closeness of two figures the report derives from each other.
void ExpectClose(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::fabs(want))) << what;
}

// The report's peak of that name: "int8|bf16" is the faster of the two
// (quantized weights the int8 kernel takes at every batch).
double PeakNamed(const json& roofline, const std::string& name) {
  if (name == "int8|bf16") {
    return std::max(roofline.value("int8_gflops", 0.0), roofline.value("bf16_gflops", 0.0));
  }
  return roofline.value(name + "_gflops", 0.0);
}

// `roofline`: the report's peaks every figure is held against.
void ExpectFigure(const json& f, const std::string& where, bool moe, const json& roofline) {
  for (const char* k :
       {"sequences", "tokens", "context", "keys", "tokens_per_s", "flops_per_unit",
        "bytes_per_unit", "tokens_per_unit", "peak", "peak_gflops", "read_gbs",
        "read_gbs_source", "roofline_memory_s",
        "roofline_compute_s", "roofline_tokens_per_s", "fraction", "bound", "within_4x_l3"}) {
    EXPECT_TRUE(f.contains(k)) << where << " lacks " << k;
  }
  if (moe && where.rfind("attention", 0) != 0) {
    EXPECT_TRUE(f.contains("experts_per_layer")) << where;
    EXPECT_TRUE(f.contains("experts_source")) << where;
  }
  ExpectSummary(f["tokens_per_s"], where);
  // The roofline of one unit: its bytes at the read bandwidth sampled
  // after it, its FLOPs at the figure's GEMM peak, whichever is slower.
  ExpectClose(f.value("peak_gflops", 0.0), PeakNamed(roofline, f.value("peak", "")),
              where + " peak");
  EXPECT_EQ(f.value("read_gbs_source", ""), "sampled") << where;
  EXPECT_GT(f.value("read_gbs", 0.0), 0) << where;
  const double mem_s = f.value("bytes_per_unit", 0.0) / (f.value("read_gbs", 0.0) * 1e9);
  // Routed experts with few rows each take their own kernel's peak.
  double compute_s = f.value("flops_per_unit", 0.0) / (f.value("peak_gflops", 0.0) * 1e9);
  if (f.contains("expert_peak")) {
    ExpectClose(f.value("expert_peak_gflops", 0.0), PeakNamed(roofline, f.value("expert_peak", "")),
                where + " expert peak");
    const double expert = f.value("expert_flops_per_unit", 0.0);
    EXPECT_GT(expert, 0) << where;
    compute_s = (f.value("flops_per_unit", 0.0) - expert) / (f.value("peak_gflops", 0.0) * 1e9) +
                expert / (f.value("expert_peak_gflops", 0.0) * 1e9);
  }
  ExpectClose(f.value("roofline_memory_s", 0.0), mem_s, where + " memory roofline");
  ExpectClose(f.value("roofline_compute_s", 0.0), compute_s, where + " compute roofline");
  EXPECT_EQ(f.value("bound", ""), mem_s >= compute_s ? "memory" : "compute") << where;
  const double rate = f.value("tokens_per_unit", 0.0) / std::max(mem_s, compute_s);
  ExpectClose(f.value("roofline_tokens_per_s", 0.0), rate, where + " roofline rate");
  const double fr = f.value("fraction", 0.0);
  ExpectClose(fr, f["tokens_per_s"].value("median", 0.0) / rate, where + " fraction");
  EXPECT_GT(fr, 0) << where;
  EXPECT_LE(fr, 10) << where;
}

void ExpectReport(const json& j, bool moe) {
  ASSERT_TRUE(j.is_object());
  for (const char* k :
       {"machine", "settings", "peaks", "model", "pp", "tg", "decode", "attention"}) {
    ASSERT_TRUE(j.contains(k)) << "report lacks " << k;
  }
  for (const char* k :
       {"cpu_model", "logical_cpus", "omp_threads", "memory_bytes", "l3_bytes", "probed_features",
        "cpuinfo_flags", "kernel_isa", "bf16_gemm", "stream_prefetch", "packed_prefetch",
        "omp_wait_policy", "gomp_spincount"}) {
    EXPECT_TRUE(j["machine"].contains(k)) << "machine lacks " << k;
  }
  ExpectSummary(j["peaks"]["read_bandwidth"]["gbs"], "read_bandwidth");
  ExpectSummary(j["peaks"]["read_bandwidth_after"]["gbs"], "read_bandwidth_after");
  for (const char* k : {"read_gbs", "f32_gflops", "bf16_gflops", "int8_gflops"}) {
    EXPECT_GT(j["roofline"].value(k, 0.0), 0) << k;
  }
  for (const char* k : {"gemm_f32", "gemm_bf16", "gemm_int8", "gemm_int8_q4"}) {
    ExpectSummary(j["peaks"][k]["gflops"], k);
    EXPECT_FALSE(j["peaks"][k].value("path", "").empty()) << k;
  }
  const json& m = j["model"];
  for (const char* k : {"source",          "path",
                        "format",          "arch",
                        "weight_storage",  "compute",
                        "params",          "weight_bytes",
                        "hidden",          "layers",
                        "intermediate",    "heads",
                        "kv_heads",        "head_dim",
                        "vocab",           "experts",
                        "experts_per_tok", "dense_weight_bytes",
                        "expert_bytes",    "kv_bytes_per_token"}) {
    EXPECT_TRUE(m.contains(k)) << "model lacks " << k;
  }
  EXPECT_GT(m.value("params", 0), 0);
  ASSERT_EQ(j["pp"].size(), 2u);
  ASSERT_EQ(j["decode"].size(), 2u);
  ASSERT_EQ(j["attention"].size(), 2u);
  for (const json& f : j["pp"]) ExpectFigure(f, "pp", moe, j["roofline"]);
  ExpectFigure(j["tg"], "tg", moe, j["roofline"]);
  for (const json& f : j["decode"]) ExpectFigure(f, "decode", moe, j["roofline"]);
  for (const json& f : j["attention"]) ExpectFigure(f, "attention", moe, j["roofline"]);
  // The synthetic model's temporary directory is removed at exit.
  const std::string path = m.value("path", "");
  ASSERT_FALSE(path.empty());
  EXPECT_FALSE(std::filesystem::exists(path)) << path;
}

TEST(BenchCliTest, DenseBf16) {
  const json j = Bench("dense", "");
  ExpectReport(j, false);
  EXPECT_EQ(j["model"].value("format", ""), "hf");
  EXPECT_EQ(j["decode"][1].value("sequences", 0), 4);
}

TEST(BenchCliTest, MoeQ8) {
  const json j = Bench("moe", "--dtype q8_0 --experts 4 --top-k 2");
  ExpectReport(j, true);
  EXPECT_EQ(j["model"].value("format", ""), "gguf");
  EXPECT_EQ(j["machine"].value("omp_threads", 0), 1);
  EXPECT_EQ(j["tg"].value("experts_source", ""), "exact");
  EXPECT_EQ(j["decode"][0].value("experts_source", ""), "router");
  EXPECT_DOUBLE_EQ(j["decode"][0].value("experts_per_layer", 0.0), 2.0);  // B = 1
  EXPECT_FALSE(j["decode"][1].contains("expert_peak")) << "B = 4: all of it on int8";
}

// At a batch of twice the int8 kernel's rows (B = 8 where it takes 4: in
// place beside AMX; B = 16 where it takes 8; B = 64 where it takes 32: Q8_0
// packed at load) the batch's dense part is past them but each of the 4
// experts sees about B * 2 / 4 = B / 2: its FLOPs are held against the int8
// peak, the rest against the dequantizing kernel's.
TEST(BenchCliTest, MoeQ8ExpertsKeepTheInt8PeakInALargeBatch) {
  for (int batch : {8, 16, 64}) {
    const json j =
        Bench("moe", "--dtype q8_0 --experts 4 --top-k 2", 2, "", "1," + std::to_string(batch));
    ExpectReport(j, true);
    const json& d = j["decode"][1];
    EXPECT_EQ(d.value("sequences", 0), batch);
    if (d.value("peak", "") == "int8") continue;  // the int8 kernel takes them all
    ASSERT_DOUBLE_EQ(d.value("experts_per_layer", 0.0), 4.0);
    EXPECT_EQ(d.value("expert_peak", ""), "int8");
    EXPECT_GT(d.value("expert_flops_per_unit", 0.0), 0.5 * d.value("flops_per_unit", 0.0));
    return;
  }
  ADD_FAILURE() << "the int8 kernel took every row of a 64-sequence batch";
}

// A weight budget below the model streams the last layers' FFNs; the
// report says how many, and on which device.
TEST(BenchCliTest, WeightBudgetStreamsLayers) {
  const json all = Bench("dense", "", 4);
  EXPECT_EQ(all["model"].value("streamed_layers", -1), 0);
  EXPECT_EQ(all["model"].value("device", ""), "host");
  // The budget counts the weights the engine keeps, as it keeps them (not
  // the embedding table; bf16 packed for the CPU pads k and v, 32 x 64, to
  // 64 x 64): the report's dense_weight_bytes. Half a layer's FFN (3 bf16
  // matrices of 64 x 128) short of them, three layers stream: the two
  // staging buffers take one FFN's worth more than the layers they serve.
  const double weights = all["model"].value("dense_weight_bytes", 0.0);
  const double gb = (weights - 0.5 * (3 * 64 * 128 * 2)) / 1e9;
  char flag[64];
  std::snprintf(flag, sizeof(flag), "--gpu-memory-budget %.17g", gb);
  const json j = Bench("dense", flag, 4);
  ExpectReport(j, false);
  EXPECT_EQ(j["model"].value("streamed_layers", -1), 3);
}

// With a hardware profile the report carries the planner's prediction of
// every engine figure, in the table's order, beside its measured median: at
// r_w 1 with every weight resident, below 1 when the budget streams layers,
// and a streamed placement never predicted faster than the resident one.
// Without a profile or a GPU device there is none; a bad profile fails the
// command before it measures anything.
TEST(BenchCliTest, PredictsEveryEngineFigureOnAGivenProfile) {
  const std::string hw = std::string("--hardware ") + TANDEM_PROFILES_DIR + "/h100-pcie5.json";
  const json all = Bench("dense", hw, 4);
  ExpectReport(all, false);
  EXPECT_FALSE(all.contains("device_profile"));  // the host device measures no GPU
  ASSERT_TRUE(all.contains("prediction"));
  const json& p = all["prediction"];
  EXPECT_EQ(p.value("profile", ""), "h100-pcie5");
  EXPECT_DOUBLE_EQ(p.value("weights_gpu_fraction", 0.0), 1.0);
  std::vector<const json*> measured;
  for (const json& f : all["pp"]) measured.push_back(&f);
  measured.push_back(&all["tg"]);
  for (const json& f : all["decode"]) measured.push_back(&f);
  const std::vector<std::string> labels = {"pp N=16", "pp N=32", "tg ctx=16 +4",
                                           "decode B=1 ctx=16", "decode B=4 ctx=16"};
  const json& rows = p["figures"];
  ASSERT_EQ(rows.size(), labels.size());
  ASSERT_EQ(measured.size(), labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    const json& row = rows[i];
    EXPECT_EQ(row.value("figure", ""), labels[i]);
    EXPECT_DOUBLE_EQ(row.value("measured_tokens_per_s", 0.0),
                     (*measured[i])["tokens_per_s"].value("median", -1.0))
        << labels[i];
    const double predicted = row.value("predicted_tokens_per_s", 0.0);
    EXPECT_GT(predicted, 0) << labels[i];
    EXPECT_NEAR(row.value("measured_over_predicted", 0.0),
                row.value("measured_tokens_per_s", 0.0) / predicted, 1e-9)
        << labels[i];
    EXPECT_FALSE(row.value("bottleneck", "").empty()) << labels[i];
  }
  // Four sequences share each weight read: more tokens per second.
  EXPECT_GT(rows[4].value("predicted_tokens_per_s", 0.0),
            rows[3].value("predicted_tokens_per_s", 0.0));

  // The weights the engine keeps (WeightBudgetStreamsLayers says why).
  const double weights = all["model"].value("dense_weight_bytes", 0.0);
  char flag[96];
  std::snprintf(flag, sizeof(flag), " --gpu-memory-budget %.17g",
                (weights - 0.5 * (3 * 64 * 128 * 2)) / 1e9);
  const json streamed = Bench("dense", hw + flag, 4);
  ASSERT_EQ(streamed["model"].value("streamed_layers", -1), 3);
  // Three FFNs of 3 bf16 matrices of 64 x 128.
  EXPECT_DOUBLE_EQ(streamed["model"].value("streamed_bytes", 0.0), 3 * 3 * 64 * 128 * 2);
  ASSERT_TRUE(streamed.contains("prediction"));
  const double r_w = streamed["prediction"].value("weights_gpu_fraction", 0.0);
  EXPECT_GT(r_w, 0);
  EXPECT_LT(r_w, 1);
  const json& srows = streamed["prediction"]["figures"];
  ASSERT_EQ(srows.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_LE(srows[i].value("predicted_tokens_per_s", 0.0),
              rows[i].value("predicted_tokens_per_s", 0.0) * (1 + 1e-12))
        << labels[i];
  }

  EXPECT_FALSE(Bench("dense", "", 1).contains("prediction"));
  int status = -1;
  RunCommand(std::string(TANDEM_BINARY) + " bench --synthetic dense --hardware " +
                 TANDEM_PROFILES_DIR + "/no-such-profile.json --json",
             &status);
  EXPECT_NE(status, 0);
}

// bench computes alone: OpenMP threads sleep when idle after a short spin
// (cli/openmp_environment.h); a wait policy the user set is left alone.
TEST(BenchCliTest, OpenMpThreadsSpinBrieflyThenSleepUnlessTheUserChose) {
  const std::string clean = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u TANDEM_OPENMP_WAIT ";
  json j = Bench("dense", "", 1, clean);
  ASSERT_TRUE(j.contains("machine"));
  EXPECT_EQ(j["machine"].value("omp_wait_policy", ""), "PASSIVE");
  EXPECT_EQ(j["machine"].value("gomp_spincount", ""), "20000");
  j = Bench("dense", "", 1, clean + "OMP_WAIT_POLICY=ACTIVE ");
  ASSERT_TRUE(j.contains("machine"));
  EXPECT_EQ(j["machine"].value("omp_wait_policy", ""), "ACTIVE");
  EXPECT_EQ(j["machine"].value("gomp_spincount", "x"), "");
}

TEST(BenchCliTest, BadFlagsFail) {
  int status = 0;
  RunCommand(std::string(TANDEM_BINARY) + " bench --synthetic huge 2>/dev/null", &status);
  EXPECT_NE(status, 0);
  RunCommand(std::string(TANDEM_BINARY) + " bench 2>/dev/null", &status);
  EXPECT_NE(status, 0);
  for (const char* bad : {"--gpu-memory-budget -1", "--device tpu", "--device cuda:4096",
                          "--dtype f8"}) {
    RunCommand(std::string(TANDEM_BINARY) + " bench --synthetic dense " + bad + " 2>/dev/null",
               &status);
    EXPECT_NE(status, 0) << bad;
  }
  // Bad list entries and counts fail before anything is measured or written.
  for (const char* bad : {"--pp 128 0", "--batches 0 4", "--attn-contexts 0", "--context 0",
                          "--tg-tokens 0", "--decode-steps 0"}) {
    const std::string out = RunCommand(
        std::string(TANDEM_BINARY) + " bench --synthetic dense " + bad + " 2>&1", &status);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(out.find("must be > 0"), std::string::npos) << bad << ": " << out;
    EXPECT_EQ(out.find("measuring"), std::string::npos) << bad << ": " << out;
  }
}

}  // namespace
