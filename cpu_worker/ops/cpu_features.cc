#include "cpu_worker/ops/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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
  const Regs l0 = CpuId(0, 0);
  // "AuthenticAMD" in EBX, EDX, ECX order.
  f.amd = l0.ebx == 0x68747541u && l0.edx == 0x69746e65u && l0.ecx == 0x444d4163u;
  const Regs l1 = CpuId(1, 0);
  const int base_family = static_cast<int>((l1.eax >> 8) & 0xf);
  f.family =
      base_family == 0xf ? base_family + static_cast<int>((l1.eax >> 20) & 0xff) : base_family;
  const bool osxsave = Bit(l1.ecx, 27);
  const bool avx = Bit(l1.ecx, 28);
  f.fma = Bit(l1.ecx, 12);
  f.f16c = Bit(l1.ecx, 29);
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
    f.avx512_vnni = f.avx512f && Bit(l7.ecx, 11);
    f.amx_bf16 = f.os_amx && Bit(l7.edx, 22);
    f.amx_int8 = f.os_amx && Bit(l7.edx, 25);
    if (l7.eax >= 1) {
      const Regs l71 = CpuId(7, 1);
      f.avx512_bf16 = f.avx512f && Bit(l71.eax, 5);
      f.avx_vnni = f.os_avx && Bit(l71.eax, 4);
    }
  }
  f.fma = f.fma && f.os_avx;
  f.f16c = f.f16c && f.os_avx;
  return f;
}

}  // namespace

const CpuFeatures& HostCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

KernelIsa MaxKernelIsa() {
  static const KernelIsa isa = [] {
    const CpuFeatures& f = HostCpuFeatures();
    KernelIsa best = KernelIsa::kScalar;
    if (f.avx2 && f.fma && f.f16c) best = KernelIsa::kAvx2;
    if (best == KernelIsa::kAvx2 && f.avx512f && f.avx512bw && f.avx512vl) {
      best = f.avx512_vnni ? KernelIsa::kAvx512Vnni : KernelIsa::kAvx512;
    }
    const char* v = std::getenv("TANDEM_CPU_ISA");
    KernelIsa cap = KernelIsa::kAvx512Vnni;
    if (v != nullptr && std::strcmp(v, "avx512") == 0) cap = KernelIsa::kAvx512;
    if (v != nullptr && std::strcmp(v, "avx2") == 0) cap = KernelIsa::kAvx2;
    if (v != nullptr && std::strcmp(v, "scalar") == 0) cap = KernelIsa::kScalar;
    return std::min(best, cap);
  }();
  return isa;
}

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kScalar:
      return "scalar";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
    case KernelIsa::kAvx512Vnni:
      return "avx512_vnni";
  }
  return "?";
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
  add(f.f16c, "f16c");
  add(f.avx_vnni, "avx_vnni");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  add(f.amd, "amd");
  if (f.family != 0) {
    char family[24];
    std::snprintf(family, sizeof(family), "%sfamily 0x%x", s.empty() ? "" : " ", f.family);
    s += family;
  }
  return s;
}

// Every CPU with AVX512-BF16 has AVX512-VNNI too; requiring the VNNI level
// makes TANDEM_CPU_ISA=avx512 stand for a CPU with neither (Skylake-SP).
bool CpuHasBf16() {
  return HostCpuFeatures().avx512_bf16 && MaxKernelIsa() >= KernelIsa::kAvx512Vnni &&
         !CpuIsaForcedF32();
}

}  // namespace tandem::ops
