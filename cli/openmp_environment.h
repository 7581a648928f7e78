// Idle OpenMP threads must sleep, not spin: Tandem's processes hand work to
// each other (gpu_worker <-> cpu_worker) and share cores with other
// processes, and libgomp's default of busy-waiting after every parallel
// region starves whoever else needs the core — measured on a loaded 2-core
// machine: 0.7 decode tokens/s with the default, 22 with OMP_WAIT_POLICY=
// PASSIVE. libgomp reads the variable when it loads, before main(), so the
// process re-executes itself once with it set. A value the user set wins.
#ifndef TANDEM_CLI_OPENMP_ENVIRONMENT_H_
#define TANDEM_CLI_OPENMP_ENVIRONMENT_H_

namespace tandem::cli {

// Call first in main(). Returns only if no re-execution was needed or it
// failed (then the process goes on with the default policy).
void EnsurePassiveOpenMpWait(char** argv);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_OPENMP_ENVIRONMENT_H_
