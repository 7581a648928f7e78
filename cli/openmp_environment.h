// Idle OpenMP threads must sleep, not spin: Tandem's processes hand work to
// each other (gpu_worker <-> cpu_worker) and share cores with other
// processes, and libgomp's default of busy-waiting after every parallel
// region starves whoever else needs the core — measured on a loaded 2-core
// machine: 0.7 decode tokens/s with the default, 22 with OMP_WAIT_POLICY=
// PASSIVE. libgomp reads the variable when it loads, before main(), so the
// process re-executes itself once with it set. A value the user set wins.
//
// A process that computes alone (`bench`; `generate` without a cpu_worker;
// the one gpu_worker `serve` starts when no cpu_worker shares the cores)
// spins a short while before it sleeps (GOMP_SPINCOUNT=kAloneSpinCount,
// tens of microseconds): a decode step is a run of parallel regions (MoE
// decode: three GEMVs of a few MB per expert) separated by less than a
// futex wake-up, and sleeping between them cost MoE decode at batch 1
// 15-25 % of its bandwidth (docs/PERFORMANCE.md). Processes that hand work
// to each other keep no spin: there a spinning thread holds the core its
// peer needs (`generate --cpu-experts all` on a 4-layer MoE: 4.5-5.2 s
// without, 5.4-5.7 s with 20000, 6.4-6.8 s with 100000).
#ifndef TANDEM_CLI_OPENMP_ENVIRONMENT_H_
#define TANDEM_CLI_OPENMP_ENVIRONMENT_H_

namespace tandem::cli {

inline constexpr const char kAloneSpinCount[] = "20000";

// Call first in main(). Returns only if no re-execution was needed or it
// failed (then the process goes on with the default policy).
void EnsureOpenMpWait(char** argv);

// True if the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (not this
// process's re-execution).
bool OpenMpWaitChosenByUser();

// Gives the processes this one starts from now on the short spin of a
// process that computes alone (unless the user chose the wait).
void SpinBeforeSleepInChildren();

}  // namespace tandem::cli

#endif  // TANDEM_CLI_OPENMP_ENVIRONMENT_H_
