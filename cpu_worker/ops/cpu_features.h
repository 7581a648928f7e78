// Run-time probing of the host CPU's instruction-set extensions (cpuid and
// xgetbv), so that one binary picks its fast paths on the machine it runs on.
#ifndef TANDEM_CPU_WORKER_OPS_CPU_FEATURES_H_
#define TANDEM_CPU_WORKER_OPS_CPU_FEATURES_H_

#include <string>

namespace tandem::ops {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;  // cpuid leaf 7 subleaf 1, EAX bit 4 (256-bit VNNI)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;  // cpuid leaf 7, ECX bit 11
  bool avx512_bf16 = false;  // cpuid leaf 7 subleaf 1, EAX bit 5
  bool amx_bf16 = false;
  bool amx_int8 = false;   // cpuid leaf 7, EDX bit 25
  bool os_avx = false;     // the OS saves YMM state (XCR0 bits 1, 2)
  bool os_avx512 = false;  // the OS saves opmask and ZMM state (XCR0 bits 5, 6, 7)
  bool os_amx = false;     // the OS saves tile state (XCR0 bits 17, 18)
  bool amd = false;        // vendor "AuthenticAMD" (cpuid leaf 0): which kernels are fast differs
  // Display family (cpuid leaf 1: base family, plus the extended family
  // where the base is 0xF): on AMD, 0x19 is Zen 3/4 and 0x1A Zen 5, whose
  // memory systems want different prefetch levels (stream_prefetch.h).
  int family = 0;
};

// The host's features, probed once. Not affected by TANDEM_CPU_ISA.
const CpuFeatures& HostCpuFeatures();

// Instruction-set levels of the hand-written kernels, in increasing order.
enum class KernelIsa {
  kScalar,      // plain C++ (compiler-vectorised for the baseline target)
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512,      // AVX-512 F/BW/VL
  kAvx512Vnni,  // kAvx512 + AVX512-VNNI
};

// The best level the host supports, capped by TANDEM_CPU_ISA=avx512 (no
// VNNI, bf16 or AMX kernels: a Skylake-SP's on a later CPU), =avx2 or
// =scalar (so tests
// and users can force the fallbacks; oneDNN is capped at AVX2 or SSE4.1
// with the last two, onednn_matmul.cc). Probed and read once, at the first
// call.
KernelIsa MaxKernelIsa();

// "scalar", "avx2", "avx512", "avx512_vnni".
const char* KernelIsaName(KernelIsa isa);

// True if the environment forces f32 GEMMs (TANDEM_CPU_ISA=f32). Read on
// every call so tests may set it in-process. (TANDEM_CPU_ISA=avx2 and
// =scalar also rule out bf16 GEMMs, through MaxKernelIsa.)
bool CpuIsaForcedF32();

// "avx2 fma avx512f ... amd" for logs.
std::string CpuFeaturesString(const CpuFeatures& f);

}  // namespace tandem::ops

#endif  // TANDEM_CPU_WORKER_OPS_CPU_FEATURES_H_
