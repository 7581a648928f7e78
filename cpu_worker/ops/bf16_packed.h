// An AVX512-BF16 kernel of our own for decode-sized batches on bf16 weights
// packed by PackBf16 (onednn_matmul.h): oneDNN's blocked layout
// BA16a64b2a, read where it lies; and on AVX-512 CPUs without AVX512-BF16
// (Skylake-SP, Cascade Lake, Ice Lake) the same pass with the weight
// widened exactly to f32 in registers and x kept in f32, for every batch
// size (PackedBf16Widens). Internal to ops.
//
// The layout: the [k, n] weight (input, output) in blocks of 32 inputs by
// 64 outputs, k and n zero-padded to whole blocks; the blocks of one run of
// 64 outputs lie one after another (4 KiB each, in input order), and the
// runs follow in output order. Within a block, input pair p (inputs 2p and
// 2p + 1) is 256 bytes: four 64-byte vectors of 16 outputs, each output's
// two bf16 side by side, the operand layout of vdpbf16ps. So 64 outputs of
// one row of x are four accumulators, and each vector takes one vdpbf16ps
// per row of x against that row's pair of inputs broadcast to all lanes: no
// horizontal sums, and a thread's outputs are one stream of bytes.
//
// Why not oneDNN's GEMM on the same bytes: its kernels read the weight and
// compute in series at decode sizes. On the Zen 4 EPYC VM (bf16 peak 449
// GFLOP/s, sweeps 35-66 GB/s) dense decode B = 16 ran at 69 % of the
// compute roofline, about the time of streaming the weight plus the time of
// the arithmetic, and one row read 38-40 GB/s whatever the sweep
// (docs/PERFORMANCE.md). This kernel reuses each 16 KiB of weight from L1
// for every row of x, fetches the stream ahead in software
// (PackedPrefetchLevel) where more than six rows share it, and leaves it to
// the hardware prefetchers below that, where one row then reads at the
// sweep's rate in both of the VM's bandwidth phases.
#ifndef TANDEM_CPU_WORKER_OPS_BF16_PACKED_H_
#define TANDEM_CPU_WORKER_OPS_BF16_PACKED_H_

#include <cstdint>

namespace tandem::ops::internal {

// Linear runs batches of up to this many rows on packed bf16 weights
// through PackedBf16Linear; larger ones (prefill) through oneDNN's GEMM,
// whose result for a row differs by f32 summation order.
inline constexpr int64_t kPackedBf16KernelMaxRows = 32;

// True if this CPU runs the kernel: AVX512-BF16, or AVX-512 F/BW/VL to
// widen (TANDEM_CPU_ISA=f32 on an AVX512-BF16 CPU takes the widening one;
// =avx2 and =scalar neither). Reads the environment.
bool PackedBf16KernelHere();

// True if the kernel here widens the weight and keeps x in f32: AVX-512
// without bf16 GEMMs (CpuHasBf16). Its outputs are then f32 sums, in input
// order, of the exact products of x and the weight's values, as the
// in-place widening kernels' are (widened_linear.h), and Linear runs every
// batch size on it: on a 2-vCPU Skylake-SP VM 97-139 GFLOP/s at 16 rows
// against 69 for the in-place kernel, and 113-133 at 512 rows against
// 96-137 for widened panels through oneDNN's f32 GEMM; dense decode B = 16
// 1.5-1.8x as fast in the engine (docs/PERFORMANCE.md). Reads the
// environment.
bool PackedBf16Widens();

// The index, in bf16 elements, of weight element (output j, input i) of an
// [n, k] weight packed by PackBf16; the packing's bytes are
// PackedBf16Elements(n, k) * 2 (its padding zero).
int64_t PackedBf16Index(int64_t j, int64_t i, int64_t k);
int64_t PackedBf16Elements(int64_t n, int64_t k);

// y[m, n] = x[m, k] · W^T (+ bias[n]) for the [n, k] bf16 weight packed at
// `packed`: x rounded to bf16 (to nearest even), each output summed in f32
// by vdpbf16ps over the input pairs in order; where PackedBf16Widens, x in
// f32 and each output summed in f32 by FMAs over the inputs in order. A
// row's result is the same bits whatever m and the thread count. Any m
// works (rows in slices of 32); needs PackedBf16KernelHere().
void PackedBf16Linear(const float* x, int64_t m, const void* packed, int64_t n, int64_t k,
                      const float* bias, float* y);

// One PackedBf16Linear's operands.
struct PackedBf16Call {
  const float* x;
  int64_t m;
  const void* w;
  int64_t n, k;
  const float* bias;
  float* y;
};

// The calls, each the same bits as PackedBf16Linear gives it, in one
// parallel region, with x laid out (rounded to bf16 unless widening) once
// for calls on the same x (m and k) and on all the threads: a decode
// step's q, k and v (and an MLP's gate and up) are matrices of a few MB,
// and every region's start and end, and a rounding of x on one thread
// while the other waits, cost both.
void PackedBf16LinearGroup(const PackedBf16Call* calls, int64_t count);

// The plain loop the kernel is tested against: the packed weight read back
// element by element (PackedBf16Index) and x rounded to bf16 as the kernel
// rounds it (unless PackedBf16Widens), summed in double. The kernel's f32
// sums differ from it by rounding only (vdpbf16ps's order of its two
// products, and its flushing of denormals, are the CPU's).
void ReferencePackedBf16Linear(const float* x, int64_t m, const void* packed, int64_t n, int64_t k,
                               const float* bias, float* y);

}  // namespace tandem::ops::internal

#endif  // TANDEM_CPU_WORKER_OPS_BF16_PACKED_H_
