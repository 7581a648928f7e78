// The `tandem` executable: one binary, one subcommand per role. This
// dispatcher is the only code that links every module.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "cli/bench_command.h"
#include "cli/bench_serve_command.h"
#include "cli/coordinator_command.h"
#include "cli/cpu_worker_command.h"
#include "cli/flag_config_file.h"
#include "cli/flag_environment.h"
#include "cli/flag_sources.h"
#include "cli/generate_command.h"
#include "cli/gpu_worker_command.h"
#include "cli/llama_cpp_short_flags.h"
#include "cli/openmp_environment.h"
#include "cli/plan_command.h"
#include "cli/serve_command.h"
#include "common/version.h"
#include "cpu_worker/ops/amx_linear.h"

int main(int argc, char** argv) {
  tandem::cli::EnsureOpenMpWait(argv);
  CLI::App app{"Tandem: serves large language models across GPU and CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tandem ") + tandem::kVersion);
  tandem::cli::GenerateOptions gen;
  CLI::App* generate = tandem::cli::AddGenerateCommand(app, gen);
  tandem::cli::CpuWorkerOptions cpu;
  CLI::App* cpu_worker = tandem::cli::AddCpuWorkerCommand(app, cpu);
  tandem::cli::GpuWorkerOptions gpu;
  CLI::App* gpu_worker = tandem::cli::AddGpuWorkerCommand(app, gpu);
  tandem::cli::ServeOptions serve;
  CLI::App* serve_cmd = tandem::cli::AddServeCommand(app, serve);
  tandem::cli::CoordinatorOptions coord;
  CLI::App* coord_cmd = tandem::cli::AddCoordinatorCommand(app, coord);
  tandem::cli::BenchCommandOptions bench;
  CLI::App* bench_cmd = tandem::cli::AddBenchCommand(app, bench);
  tandem::cli::BenchServeOptions bench_serve;
  CLI::App* bench_serve_cmd = tandem::cli::AddBenchServeCommand(*bench_cmd, bench_serve);
  tandem::cli::PlanCommandOptions plan;
  CLI::App* plan_cmd = tandem::cli::AddPlanCommand(app, plan);
  tandem::cli::AddConfigFlag(app);
  tandem::cli::BindFlagsToEnvironment(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  tandem::cli::RewriteLlamaCppShortFlags(&args);
  tandem::cli::AppliedConfig config;
  if (absl::Status s = tandem::cli::ApplyConfigFile(app, &args, &config); !s.ok()) {
    std::fprintf(stderr, "tandem: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  // Flags set by TANDEM_ARG_ variables or the config file, named in errors.
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (args.empty() || sub->get_name() != args[0]) continue;
    for (const CLI::App* nested : sub->get_subcommands({})) {  // `tandem bench serve`
      if (args.size() > 1 && nested->get_name() == args[1]) sub = nested;
    }
    tandem::cli::RecordFlagSources(
        tandem::cli::FindFlagSources(*sub, args, config.file, config.variables));
  }
  std::vector<char*> parsed_argv = {argv[0]};
  for (std::string& a : args) parsed_argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(parsed_argv.size()), parsed_argv.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // CLI11 reports bad flags through exceptions; they stop here
    std::fputs(
        tandem::cli::ExplainFlagSources("tandem", e.what(), tandem::cli::RecordedFlagSources())
            .c_str(),
        stderr);
    return rc;
  }
  // A client of a server: no kernels, no probe.
  if (bench_serve_cmd->parsed()) return tandem::cli::RunBenchServe(bench_serve);
  // The AMX probe forks a child: do it while this process is small and has
  // no threads beyond OpenMP's, not at the first decode batch after the
  // weights are mapped (a fork then copies their page tables, and a strict
  // overcommit policy could refuse it).
  if (!plan_cmd->parsed()) tandem::ops::internal::AmxUsable();
  if (serve_cmd->parsed()) return tandem::cli::RunServe(serve);
  if (coord_cmd->parsed()) return tandem::cli::RunCoordinator(coord);
  if (generate->parsed()) return tandem::cli::RunGenerate(gen);
  if (bench_cmd->parsed()) return tandem::cli::RunBench(bench);
  if (plan_cmd->parsed()) return tandem::cli::RunPlan(plan);
  if (cpu_worker->parsed()) return tandem::cli::RunCpuWorker(cpu);
  if (gpu_worker->parsed()) return tandem::cli::RunGpuWorker(gpu);
  return 1;
}
