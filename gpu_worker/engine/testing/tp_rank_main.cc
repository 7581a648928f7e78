// One tensor-parallel rank of the test workload as its own process:
//   engine_tp_rank MODEL GROUP RANK SIZE OUT
// joins the shared-memory all-reduce GROUP, runs the script (tp_script.h)
// and writes its result to OUT. Exit status 0 on success; the error on
// stderr otherwise.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_worker/engine/shm_all_reduce.h"
#include "gpu_worker/engine/testing/tp_script.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL GROUP RANK SIZE OUT\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[3]), size = std::atoi(argv[4]);
  tandem::ShmAllReduceOptions o;
  o.timeout = absl::Seconds(120);
  auto ar = tandem::ShmAllReduce::Create(argv[2], rank, size, o);
  if (!ar.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, ar.status().ToString().c_str());
    return 1;
  }
  auto engine = tandem::testing::MakeTpEngine(argv[1], ar->get());
  absl::Status s = engine.status();
  if (s.ok()) {
    auto r = tandem::testing::RunTpScript(**engine);
    s = r.ok() ? tandem::testing::WriteTpResult(*r, argv[5]) : r.status();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}
