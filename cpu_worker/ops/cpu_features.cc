#include "cpu_worker/ops/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu_worker/ops/linear.h"

namespace tandem::ops {
namespace {

struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs CpuId(uint32_t leaf, uint32_t subleaf) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

uint64_t XGetBv0() {
  uint32_t lo = 0, hi = 0;
  // xgetbv with ecx = 0 reads XCR0; encoded as bytes so no -mxsave is needed.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool Bit(uint32_t v, int b) { return ((v >> b) & 1u) != 0; }

CpuFeatures Probe() {
  CpuFeatures f;
  const uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  const Regs l1 = CpuId(1, 0);
  const bool osxsave = Bit(l1.ecx, 27);
  const bool avx = Bit(l1.ecx, 28);
  f.fma = Bit(l1.ecx, 12);
  uint64_t xcr0 = 0;
  if (osxsave) xcr0 = XGetBv0();
  f.os_avx = avx && (xcr0 & 0x6) == 0x6;
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
  f.os_amx = (xcr0 & 0x60000) == 0x60000;
  if (max_leaf >= 7) {
    const Regs l7 = CpuId(7, 0);
    f.avx2 = f.os_avx && Bit(l7.ebx, 5);
    f.avx512f = f.os_avx512 && Bit(l7.ebx, 16);
    f.avx512bw = f.avx512f && Bit(l7.ebx, 30);
    f.avx512vl = f.avx512f && Bit(l7.ebx, 31);
    f.amx_bf16 = f.os_amx && Bit(l7.edx, 22);
    if (l7.eax >= 1) {
      const Regs l71 = CpuId(7, 1);
      f.avx512_bf16 = f.avx512f && Bit(l71.eax, 5);
    }
  }
  f.fma = f.fma && f.os_avx;
  return f;
}

}  // namespace

const CpuFeatures& HostCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

bool CpuIsaForcedF32() {
  const char* v = std::getenv("TANDEM_CPU_ISA");
  return v != nullptr && std::strcmp(v, "f32") == 0;
}

std::string CpuFeaturesString(const CpuFeatures& f) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.amx_bf16, "amx_bf16");
  return s;
}

bool CpuHasBf16() { return HostCpuFeatures().avx512_bf16 && !CpuIsaForcedF32(); }

}  // namespace tandem::ops
