#include "cli/openmp_environment.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem::cli {

void EnsurePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "tandem: cannot re-execute with OMP_WAIT_POLICY=PASSIVE (%s); going on\n",
               std::strerror(errno));
}

}  // namespace tandem::cli
