// <immintrin.h> for the hand-written kernels, without GCC 12's false
// reports: its AVX-512 headers build their "undefined" operands from
// self-initialised locals, which -W(maybe-)uninitialized reports wherever
// the intrinsics are inlined into a function with a target attribute (GCC
// PR 105593). The reports point into the header, so silencing them around
// its inclusion silences exactly those.
#ifndef TANDEM_CPU_WORKER_OPS_INTRINSICS_H_
#define TANDEM_CPU_WORKER_OPS_INTRINSICS_H_

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#endif  // TANDEM_CPU_WORKER_OPS_INTRINSICS_H_
