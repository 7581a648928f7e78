#include "cpu_worker/ops/amx_linear.h"

#include <omp.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/dequant_bf16.h"
#include "cpu_worker/ops/intrinsics.h"
#include "cpu_worker/ops/quant_gemv_kernels.h"

namespace tandem::ops::internal {
namespace {

#define TANDEM_AMX \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,f16c")))
#define TANDEM_AMX_INT8 \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,f16c,fma")))

// Linux's arch_prctl codes for the AMX tile data permission (asm/prctl.h;
// spelled out for older headers).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// k-elements per tile block (a 64-byte tile row of bf16).
constexpr int64_t kKBlock = 32;
// Bytes of one packed B tile: 16 pair rows x 16 columns x 4 bytes.
constexpr int64_t kBTileBytes = 16 * 64;
// Weight rows per A tile, and per parallel item (two A tiles).
constexpr int64_t kTileRows = 16;
constexpr int64_t kItemRows = 2 * kTileRows;
// How far ahead (in k-blocks, 64 bytes of each weight row) the software
// prefetch runs: the hardware prefetcher follows a few streams per core,
// an item reads 32 rows side by side.
constexpr int64_t kPrefetchBlocks = 4;
// How far ahead in each weight row the quantized items prefetch (bytes):
// the item reads 32 rows side by side, a block (18-34 bytes) at a time.
constexpr int64_t kQuantPrefetchBytes = 512;
// The same for the int8 kernel, which spends less time per block: 128-192
// bytes ran 19-20 GB/s of Q8_0 at 8-16 rows (BM_QuantSmallBatchPaths,
// cold), 256 18-19, 512 16, 1024 12-13; into L2 no better.
constexpr int64_t kInt8PrefetchBytes = 192;
// Least weight bytes worth a parallel region (see decode_attention.cc: a
// woken team costs ~10 us).
constexpr int64_t kMinParallelBytes = int64_t{256} << 10;

// The 64-byte tile configuration ldtilecfg reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles: 0-3 C (weight tile a/b x column tile 0/1), 4-5 A (weight rows),
// 6-7 B (packed x). `cols0`/`cols1`: rows of x in column tiles 0 and 1.
TileConfig MakeConfig(int cols0, int cols1) {
  TileConfig c;
  const int cols[2] = {cols0, cols1};
  for (int t = 0; t < 8; ++t) c.rows[t] = 16;
  for (int mt = 0; mt < 2; ++mt) {
    const auto bytes = static_cast<uint16_t>(4 * std::max(cols[mt], 1));
    c.colsb[0 + 2 * mt] = bytes;  // C, weight tile a
    c.colsb[1 + 2 * mt] = bytes;  // C, weight tile b
    c.colsb[6 + mt] = bytes;      // B
  }
  c.colsb[4] = c.colsb[5] = 64;  // A: 32 bf16 of k
  return c;
}

// The same tiles for int8 operands, one GGUF block of k per multiply:
// A 16 weight rows x 32 bytes, B 8 rows (k quads) x 4 bytes per column of x.
TileConfig MakeInt8Config(int cols0, int cols1) {
  TileConfig c = MakeConfig(cols0, cols1);
  c.colsb[4] = c.colsb[5] = 32;
  c.rows[6] = c.rows[7] = 8;
  // One column tile: tiles 2, 3 and 7 take turns with 0, 1 and 6.
  if (cols1 == 0) c.colsb[2] = c.colsb[3] = c.colsb[7] = c.colsb[0];
  return c;
}

// The child's half of the probe: one tile multiply of known values.
TANDEM_AMX int ProbeChild() {
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3f80;  // 1.0
    b[i] = 0x4000;  // 2.0
  }
  const TileConfig cfg = MakeConfig(16, 16);
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(4, a, 64);
  _tile_loadd(6, b, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_stored(0, c, 64);
  _tile_release();
  for (float v : c) {
    if (v != 64.0f) return 1;
  }
  return 0;
}

// The int8 half: -3 * 5 summed over 32 k, where the CPU lists AMX-INT8.
TANDEM_AMX_INT8 int ProbeInt8Child() {
  alignas(64) int8_t a[16 * 32], b[8 * 64];
  alignas(64) int32_t c[16 * 16];
  std::memset(a, -3, sizeof(a));
  std::memset(b, 5, sizeof(b));
  const TileConfig cfg = MakeInt8Config(16, 16);
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_loadd(4, a, 32);
  _tile_loadd(6, b, 64);
  _tile_dpbssd(0, 4, 6);
  _tile_stored(0, c, 64);
  _tile_release();
  for (int32_t v : c) {
    if (v != -480) return 1;
  }
  return 0;
}

// Runs `child` in a child process: true if it exited with 0 (a faulting
// tile instruction kills the child alone).
bool RunProbeChild(int (*child)()) {
  // The raw system call, not fork(): no atfork handlers run (gRPC's among
  // them), and the child touches nothing but its own stack before _exit.
  const long pid = syscall(SYS_fork);
  if (pid < 0) return false;
  if (pid == 0) _exit(child());
  int status = 0;
  if (waitpid(static_cast<pid_t>(pid), &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool Probe() {
  // (AMX CPUs have AVX512-VNNI: TANDEM_CPU_ISA=avx512 rules AMX out too.)
  if (MaxKernelIsa() < KernelIsa::kAvx512Vnni || CpuIsaForcedF32()) return false;
  const CpuFeatures& f = HostCpuFeatures();
  if (!f.amx_bf16 || !f.os_amx || !f.avx512_bf16) return false;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  return RunProbeChild(ProbeChild);
}

// x rows [m0, m0 + cols) (cols <= 16) rounded to bf16 into one column
// tile's packed B layout: for each k pair p, a 64-byte row holding
// (x[c][2p], x[c][2p + 1]) for c = 0..15, zero past `cols`.
TANDEM_AMX void PackColumns(const float* x, int64_t k, int cols, uint8_t* pack) {
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(64));
  if (cols < 16) std::memset(pack, 0, static_cast<size_t>(k / 2 * 64));
  for (int c = 0; c < cols; ++c) {
    const float* xr = x + c * k;
    uint8_t* base = pack + 4 * c;
    for (int64_t kb = 0; kb < k; kb += kKBlock) {
      // 32 floats -> 32 bf16 (RNE) = 16 pairs, pair p to row kb/2 + p.
      const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + kb + 16), _mm512_loadu_ps(xr + kb));
      _mm512_i32scatter_epi32(base + kb / 2 * 64, offsets, reinterpret_cast<__m512i>(h), 1);
    }
  }
}

// The C tiles of an item: NB (1 or 2) weight tiles x MT (1 or 2) column
// tiles (see MakeConfig for the tile numbers).
template <int NB, int MT>
TANDEM_AMX __attribute__((always_inline)) inline void ZeroC() {
  _tile_zero(0);
  if constexpr (NB == 2) _tile_zero(1);
  if constexpr (MT == 2) _tile_zero(2);
  if constexpr (NB == 2 && MT == 2) _tile_zero(3);
}

// C += A · B for k-block kb: the A tiles from a0/a1 (row stride `lda`
// bytes), the B tiles from the packed x.
template <int NB, int MT>
TANDEM_AMX __attribute__((always_inline)) inline void MultiplyBlock(
    const void* a0, const void* a1, int64_t lda, const uint8_t* pack, int64_t pack_stride,
    int64_t kb) {
  _tile_loadd(6, pack + kb * kBTileBytes, 64);
  if constexpr (MT == 2) _tile_loadd(7, pack + pack_stride + kb * kBTileBytes, 64);
  _tile_loadd(4, a0, lda);
  _tile_dpbf16ps(0, 4, 6);
  if constexpr (MT == 2) _tile_dpbf16ps(2, 4, 7);
  if constexpr (NB == 2) {
    _tile_loadd(5, a1, lda);
    _tile_dpbf16ps(1, 5, 6);
    if constexpr (MT == 2) _tile_dpbf16ps(3, 5, 7);
  }
}

// The C tiles to out: [NB][MT][16][16] f32.
template <int NB, int MT>
TANDEM_AMX __attribute__((always_inline)) inline void StoreC(float* out) {
  _tile_stored(0, out, 64);
  if constexpr (MT == 2) _tile_stored(2, out + 256, 64);
  if constexpr (NB == 2) {
    _tile_stored(1, out + 256 * MT, 64);
    if constexpr (MT == 2) _tile_stored(3, out + 256 * MT + 256, 64);
  }
}

// One item: NB (1 or 2) weight tiles against MT (1 or 2) column tiles over
// all of k. a0/a1: the weight tiles' first rows (row stride `lda` bytes);
// pack: column tile 0's packed x (tile 1 follows at `pack_stride`); out:
// [NB][MT][16][16] f32, rows = weight rows, columns = rows of x.
template <int NB, int MT>
TANDEM_AMX void Item(const uint16_t* a0, const uint16_t* a1, int64_t lda, const uint8_t* pack,
                     int64_t pack_stride, int64_t k, bool prefetch, float* out) {
  ZeroC<NB, MT>();
  const int64_t kblocks = k / kKBlock;
  const int64_t row_elems = lda / 2;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    if (prefetch && kb + kPrefetchBlocks < kblocks) {
      const int64_t off = (kb + kPrefetchBlocks) * kKBlock;
      for (int64_t r = 0; r < kTileRows; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(a0 + r * row_elems + off), _MM_HINT_T0);
        if constexpr (NB == 2) {
          _mm_prefetch(reinterpret_cast<const char*>(a1 + r * row_elems + off), _MM_HINT_T0);
        }
      }
    }
    MultiplyBlock<NB, MT>(a0 + kb * kKBlock, a1 + kb * kKBlock, lda, pack, pack_stride, kb);
  }
  StoreC<NB, MT>(out);
}

template <int MT>
TANDEM_AMX void RunItem(int nb, const uint16_t* a0, const uint16_t* a1, int64_t lda,
                        const uint8_t* pack, int64_t pack_stride, int64_t k, bool prefetch,
                        float* out) {
  if (nb == 2) {
    Item<2, MT>(a0, a1, lda, pack, pack_stride, k, prefetch, out);
  } else {
    Item<1, MT>(a0, a1, lda, pack, pack_stride, k, prefetch, out);
  }
}

// An item of weight rows stored as GGUF blocks of T (row stride
// `row_bytes`), dequantized a block column at a time: the item's 32 rows'
// k-block kb (one GGUF block each) become the two A tiles in a 2 KiB
// buffer, which the tile loads read back from L1 — the weights are read
// once, as blocks, and no dequantized copy of the item goes through L2
// (dequantizing whole items into an L2 buffer first read 7.2 GB/s of Q8_0
// at 16 rows in BM_QuantSmallBatchPaths, this 11-13). Rows past `rows` are
// zero.
template <DType T, int NB, int MT>
TANDEM_AMX void QuantItem(const uint8_t* w, int64_t row_bytes, int64_t rows, const uint8_t* pack,
                          int64_t pack_stride, int64_t k, float* out) {
  using Block = QuantBlock<T>;
  // Two buffers in turn: the stores of block column kb + 1 need not wait
  // for the tile loads of column kb (up to 1.3x faster at 16-32 rows).
  alignas(64) uint16_t buf[2][2][kTileRows * kKBlock];
  if (rows < NB * kTileRows) std::memset(buf, 0, sizeof(buf));
  ZeroC<NB, MT>();
  const int64_t kblocks = k / kKBlock;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    uint16_t(*a)[kTileRows * kKBlock] = buf[kb & 1];
    const uint8_t* col = w + kb * static_cast<int64_t>(sizeof(Block));
    const int64_t n_rows = rows == NB * kTileRows ? NB * kTileRows : rows;
#pragma GCC unroll 4
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* b = col + r * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(b + kQuantPrefetchBytes), _MM_HINT_T0);
      DequantBlockBf16<T>(b, a[r / kTileRows] + (r % kTileRows) * kKBlock);
    }
    MultiplyBlock<NB, MT>(a[0], a[1], 64, pack, pack_stride, kb);
  }
  StoreC<NB, MT>(out);
}

template <DType T, int MT>
TANDEM_AMX void RunQuantItem(int nb, const uint8_t* w, int64_t row_bytes, int64_t rows,
                             const uint8_t* pack, int64_t pack_stride, int64_t k, float* out) {
  if (nb == 2) {
    QuantItem<T, 2, MT>(w, row_bytes, rows, pack, pack_stride, k, out);
  } else {
    QuantItem<T, 1, MT>(w, row_bytes, rows, pack, pack_stride, k, out);
  }
}

// One GGUF block of k of a column tile's activations for the int8 tiles:
// each row of x quantized to int8 per block of 32 (quant::QuantizeBlock,
// as the int8 kernels do), laid out as the B operand (row r: k = 4r ..
// 4r + 3, column c at bytes 4c .. 4c + 3), with the block's d_x and the
// term the weight type adds per column. Columns past the tile's rows of x
// are zero.
struct alignas(64) Int8Block {
  int8_t q[8 * 64];
  float dx[16];
  union {
    int32_t i[16];  // Q4_0: -8 * sum of q (the weights' offset); Q8_0: 0
    float f[16];    // Q4_1: d_x * sum of q (times the weights' min)
  } c;
};
static_assert(sizeof(Int8Block) == 640);

// Rows [0, cols) of x (cols <= 16) into one column tile of k / 32 blocks.
template <DType T>
void PackInt8Columns(const float* x, int64_t k, int cols, Int8Block* pack) {
  const int64_t kblocks = k / kKBlock;
  for (int64_t b = 0; b < kblocks; ++b) {
    Int8Block& p = pack[b];
    if (cols < 16) {
      std::memset(p.q, 0, sizeof(p.q));
      std::memset(p.dx, 0, sizeof(p.dx));
      std::memset(&p.c, 0, sizeof(p.c));
    }
    for (int c = 0; c < cols; ++c) {
      alignas(32) int8_t q[32];
      int32_t lanes[8];
      const float d = quant::QuantizeBlockAvx512(x + c * k + b * kKBlock, q, lanes);
      for (int r = 0; r < 8; ++r) std::memcpy(p.q + 64 * r + 4 * c, q + 4 * r, 4);
      int32_t sum = 0;
      for (int32_t l : lanes) sum += l;
      p.dx[c] = d;
      if constexpr (T == DType::kQ4_1) {
        p.c.f[c] = d * static_cast<float>(sum);
      } else {
        p.c.i[c] = T == DType::kQ4_0 ? -8 * sum : 0;
      }
    }
  }
}

// C tiles 0 (and 1) = the A tiles 4 (and 5, as many weight tiles as NB)
// times B tile 6, stored to cbuf[0..NB) ([16][16] int32); Int8Dots7 the
// same into C tiles 2 and 3 from B tile 7. (Tile numbers are immediates.)
template <int NB>
TANDEM_AMX_INT8 __attribute__((always_inline)) inline void Int8Dots6(int32_t (*cbuf)[16][16]) {
  _tile_zero(0);
  _tile_dpbssd(0, 4, 6);
  _tile_stored(0, cbuf[0], 64);
  if constexpr (NB == 2) {
    _tile_zero(1);
    _tile_dpbssd(1, 5, 6);
    _tile_stored(1, cbuf[1], 64);
  }
}

template <int NB>
TANDEM_AMX_INT8 __attribute__((always_inline)) inline void Int8Dots7(int32_t (*cbuf)[16][16]) {
  _tile_zero(2);
  _tile_dpbssd(2, 4, 7);
  _tile_stored(2, cbuf[0], 64);
  if constexpr (NB == 2) {
    _tile_zero(3);
    _tile_dpbssd(3, 5, 7);
    _tile_stored(3, cbuf[1], 64);
  }
}

// out[t][r][0..15] += the dot products cbuf[t][r] scaled by d_w (row r of
// weight tile t) and the columns' d_x, with Q4_0's offset and Q4_1's min
// from the activations' sums; out's weight tiles `out_stride` floats apart.
template <DType T, int NB>
TANDEM_AMX_INT8 __attribute__((always_inline)) inline void Int8Scale(
    const int32_t (*cbuf)[16][16], const Int8Block& p, const float (*dw)[16],
    const float (*mw)[16], float* out, int64_t out_stride) {
  const __m512 dx = _mm512_load_ps(p.dx);
  const __m512i ci = _mm512_load_si512(p.c.i);
  const __m512 cf = _mm512_load_ps(p.c.f);
  for (int t = 0; t < NB; ++t) {
    float* o = out + t * out_stride;
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      __m512i dot = _mm512_load_si512(cbuf[t][r]);
      if constexpr (T == DType::kQ4_0) dot = _mm512_add_epi32(dot, ci);
      const __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), dx);
      __m512 acc = _mm512_fmadd_ps(s, _mm512_set1_ps(dw[t][r]), _mm512_load_ps(o + 16 * r));
      if constexpr (T == DType::kQ4_1) acc = _mm512_fmadd_ps(cf, _mm512_set1_ps(mw[t][r]), acc);
      _mm512_store_ps(o + 16 * r, acc);
    }
  }
}

// An item of weight rows stored as GGUF blocks of T (row stride
// `row_bytes`, NB * 16 rows readable) against MT column tiles of int8
// activations (`pack`, tile 1 `pack_stride` blocks after tile 0), out as
// Item's. Per block of k the tile unit forms the integer dot products of
// the block's weights and activations (int32, exact), and the vector unit
// scales them by d_w * d_x and adds them to out in f32: nothing is
// dequantized. Q8_0's quants are the A tiles where they lie (stride
// row_bytes); Q4's nibbles are unpacked to bytes 0..15 in a buffer first,
// their offset (Q4_0) or min (Q4_1) applied through the activations' sums.
// With one column tile, C tiles 2 and 3 (and B tile 7) take every other
// block.
template <DType T, int NB, int MT>
TANDEM_AMX_INT8 void Int8Item(const uint8_t* w, int64_t row_bytes, const Int8Block* pack,
                              int64_t pack_stride, int64_t k, bool prefetch, float* out) {
  using Block = QuantBlock<T>;
  constexpr int64_t kBlockBytes = sizeof(Block);
  constexpr int64_t kQs = offsetof(Block, qs);
  // Two of each buffer in turn: a block's stores need not wait for the
  // previous block's reads.
  alignas(64) int32_t cbuf[2][MT][NB][16][16];
  alignas(64) int8_t abuf[2][NB][16][32];
  alignas(64) float dw[NB][16];
  alignas(64) float mw[NB][16];
  std::memset(out, 0, sizeof(float) * NB * MT * 256);
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(row_bytes)));
  const int64_t kblocks = k / kKBlock;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const uint8_t* col = w + kb * kBlockBytes;
    if (prefetch) {
#pragma GCC unroll 4
      for (int64_t r = 0; r < NB * kTileRows; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(col + r * row_bytes + kInt8PrefetchBytes),
                     _MM_HINT_T0);
      }
    }
    // The weights' scales (and Q4_1's mins): one dword gathered per row.
    for (int t = 0; t < NB; ++t) {
      const __m512i g = _mm512_i32gather_epi32(row_offsets, col + t * kTileRows * row_bytes, 1);
      _mm512_store_ps(dw[t], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g)));
      if constexpr (T == DType::kQ4_1) {
        _mm512_store_ps(mw[t], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))));
      }
    }
    if constexpr (T == DType::kQ8_0) {
      _tile_loadd(4, col + kQs, row_bytes);
      if constexpr (NB == 2) _tile_loadd(5, col + kTileRows * row_bytes + kQs, row_bytes);
    } else {
      int8_t(*a)[16][32] = abuf[kb & 1];
      const __m128i mask = _mm_set1_epi8(0x0f);
#pragma GCC unroll 4
      for (int64_t r = 0; r < NB * kTileRows; ++r) {
        const __m128i v =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(col + r * row_bytes + kQs));
        const __m256i q = _mm256_setr_m128i(_mm_and_si128(v, mask),
                                            _mm_and_si128(_mm_srli_epi16(v, 4), mask));
        _mm256_store_si256(reinterpret_cast<__m256i*>(a[r / kTileRows][r % kTileRows]), q);
      }
      _tile_loadd(4, a[0], 32);
      if constexpr (NB == 2) _tile_loadd(5, a[1], 32);
    }
    int32_t(*cb)[NB][16][16] = cbuf[kb & 1];
    const Int8Block& p0 = pack[kb];
    if constexpr (MT == 2) {
      const Int8Block& p1 = pack[pack_stride + kb];
      _tile_loadd(6, p0.q, 64);
      _tile_loadd(7, p1.q, 64);
      Int8Dots6<NB>(cb[0]);
      Int8Dots7<NB>(cb[1]);
      Int8Scale<T, NB>(cb[0], p0, dw, mw, out, MT * 256);
      Int8Scale<T, NB>(cb[1], p1, dw, mw, out + 256, MT * 256);
    } else {
      if (kb & 1) {
        _tile_loadd(7, p0.q, 64);
        Int8Dots7<NB>(cb[0]);
      } else {
        _tile_loadd(6, p0.q, 64);
        Int8Dots6<NB>(cb[0]);
      }
      Int8Scale<T, NB>(cb[0], p0, dw, mw, out, 256);
    }
  }
}

template <DType T, int MT>
TANDEM_AMX_INT8 void RunInt8Item(int nb, const uint8_t* w, int64_t row_bytes,
                                 const Int8Block* pack, int64_t pack_stride, int64_t k,
                                 bool prefetch, float* out) {
  if (nb == 2) {
    Int8Item<T, 2, MT>(w, row_bytes, pack, pack_stride, k, prefetch, out);
  } else {
    Int8Item<T, 1, MT>(w, row_bytes, pack, pack_stride, k, prefetch, out);
  }
}

// Items [i0, i1) of 32 weight rows each; `run.template operator()<MT>(r0,
// rows, nb, out)` computes the item at weight row r0 (`rows` rows, nb
// tiles) against MT column tiles into out.
template <typename Run>
TANDEM_AMX void RunItems(const Run& run, bool int8, int64_t n, int64_t m, const float* bias,
                         int64_t i0, int64_t i1, float* y) {
  const int mt_count = m > 16 ? 2 : 1;
  const int cols0 = static_cast<int>(std::min<int64_t>(m, 16));
  const int cols1 = static_cast<int>(std::max<int64_t>(m - 16, 0));
  const TileConfig cfg = int8 ? MakeInt8Config(cols0, cols1) : MakeConfig(cols0, cols1);
  _tile_loadconfig(&cfg);
  alignas(64) float out[2 * 2 * 256];
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t r0 = item * kItemRows;
    const int nb = r0 + kTileRows < n ? 2 : 1;
    const int64_t rows = std::min(kItemRows, n - r0);
    if (mt_count == 2) {
      run.template operator()<2>(r0, rows, nb, out);
    } else {
      run.template operator()<1>(r0, rows, nb, out);
    }
    // out[t][mt][r][c] -> y[mt * 16 + c][r0 + 16 t + r].
    for (int t = 0; t < nb; ++t) {
      for (int mt = 0; mt < mt_count; ++mt) {
        const float* o = out + (t * mt_count + mt) * 256;
        const int64_t cols = std::min<int64_t>(16, m - 16 * mt);
        const int64_t row0 = r0 + t * kTileRows;
        const int64_t nrows = std::min<int64_t>(kTileRows, n - row0);
        for (int64_t c = 0; c < cols; ++c) {
          float* yr = y + (16 * mt + c) * n + row0;
          for (int64_t r = 0; r < nrows; ++r) {
            yr[r] = o[r * 16 + c] + (bias != nullptr ? bias[row0 + r] : 0.0f);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool AmxUsable() {
  static const bool usable = Probe();
  return usable;
}

bool AmxInt8Usable() {
  static const bool usable =
      AmxUsable() && HostCpuFeatures().amx_int8 && RunProbeChild(ProbeInt8Child);
  return usable;
}

bool AmxLinearFits(int64_t m, int64_t k) {
  return m >= 1 && m <= kAmxMaxRows && k > 0 && k % kKBlock == 0;
}

namespace {

// x packed for the B operand (one layout per column tile of 16 rows of x)
// into this thread's buffer, grown once; returns it, 64-byte aligned.
uint8_t* PackX(const float* x, int64_t m, int64_t k, int64_t pack_stride) {
  thread_local std::vector<uint8_t> pack_buf;
  const size_t need = static_cast<size_t>(2 * pack_stride + 64);
  if (pack_buf.size() < need) pack_buf.resize(need);
  auto* pack = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(pack_buf.data()) + 63) & ~uintptr_t{63});
  PackColumns(x, k, static_cast<int>(std::min<int64_t>(m, 16)), pack);
  if (m > 16) PackColumns(x + 16 * k, k, static_cast<int>(m - 16), pack + pack_stride);
  return pack;
}

// `rows` weight rows of `row_bytes` from src, then zeros up to `all_rows`
// rows, in this thread's buffer (grown once): the last, partial item's
// tile loads read whole tiles. Only the tile loads read it.
const uint8_t* PaddedRows(const void* src, int64_t rows, int64_t all_rows, int64_t row_bytes) {
  thread_local std::vector<uint8_t> padded;
  padded.assign(static_cast<size_t>(all_rows * row_bytes), 0);
  std::memcpy(padded.data(), src, static_cast<size_t>(rows * row_bytes));
  return padded.data();
}

// f(std::integral_constant<DType, t>) for a GGUF block type t the kernels
// take (Q8_0, Q4_0, Q4_1).
template <typename F>
void WithBlockType(DType t, const F& f) {
  switch (t) {
    case DType::kQ8_0:
      return f(std::integral_constant<DType, DType::kQ8_0>{});
    case DType::kQ4_0:
      return f(std::integral_constant<DType, DType::kQ4_0>{});
    case DType::kQ4_1:
      return f(std::integral_constant<DType, DType::kQ4_1>{});
    default:
      TANDEM_CHECK(false && "the AMX kernels take Q8_0, Q4_0 or Q4_1 blocks");
  }
}

// Items [0, ceil(n / 32)) over the threads: a static split, so the same
// rows go to the same thread on every call (the weights a thread reads stay
// on its side of the cache). `run`: see RunItems.
template <typename Run>
void RunParallel(const Run& run, bool int8, int64_t weight_bytes, int64_t m, int64_t n,
                 const float* bias, float* y) {
  const int64_t items = (n + kItemRows - 1) / kItemRows;
  const bool parallel = weight_bytes >= kMinParallelBytes && omp_get_max_threads() > 1;
#pragma omp parallel if (parallel)
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    const int64_t i0 = items * t / threads, i1 = items * (t + 1) / threads;
    if (i0 < i1) RunItems(run, int8, n, m, bias, i0, i1, y);
  }
}

// The bf16 kernels: x packed once, then the items. `make_run(pack,
// pack_stride)` gives the item runner (see RunItems).
template <typename MakeRun>
void RunAll(const MakeRun& make_run, int64_t weight_bytes, const float* x, int64_t m, int64_t n,
            int64_t k, const float* bias, float* y) {
  const int64_t pack_stride = k / 2 * 64;
  const uint8_t* pack = PackX(x, m, k, pack_stride);
  RunParallel(make_run(pack, pack_stride), /*int8=*/false, weight_bytes, m, n, bias, y);
}

// The int8 kernel on GGUF blocks of T: x quantized and packed into this
// thread's buffer (two column tiles, grown once), then the items; the last,
// partial item from a zero-padded copy of its rows (the tile loads and the
// scale gathers read whole tiles).
template <DType T>
void AmxQuantInt8LinearOf(const float* x, int64_t m, const uint8_t* w, int64_t n, int64_t k,
                          const float* bias, float* y) {
  const int64_t kblocks = k / kKBlock;
  thread_local std::vector<Int8Block> pack_buf;
  if (pack_buf.size() < static_cast<size_t>(2 * kblocks)) pack_buf.resize(2 * kblocks);
  Int8Block* pack = pack_buf.data();
  PackInt8Columns<T>(x, k, static_cast<int>(std::min<int64_t>(m, 16)), pack);
  if (m > 16) PackInt8Columns<T>(x + 16 * k, k, static_cast<int>(m - 16), pack + kblocks);
  const int64_t row_bytes = kblocks * static_cast<int64_t>(sizeof(QuantBlock<T>));
  auto run = [=]<int MT>(int64_t r0, int64_t rows, int nb, float* out) {
    const uint8_t* a = w + r0 * row_bytes;
    bool prefetch = true;
    if (rows % kTileRows != 0) {
      a = PaddedRows(a, rows, nb * kTileRows, row_bytes);
      prefetch = false;
    }
    RunInt8Item<T, MT>(nb, a, row_bytes, pack, kblocks, k, prefetch, out);
  };
  RunParallel(run, /*int8=*/true, n * row_bytes, m, n, bias, y);
}

template <DType T>
void AmxQuantLinearOf(const float* x, int64_t m, const uint8_t* w, int64_t n, int64_t k,
                      const float* bias, float* y) {
  const int64_t row_bytes = k / kKBlock * static_cast<int64_t>(sizeof(QuantBlock<T>));
  auto make_run = [w, k, row_bytes](const uint8_t* pack, int64_t pack_stride) {
    return [=]<int MT>(int64_t r0, int64_t rows, int nb, float* out) {
      RunQuantItem<T, MT>(nb, w + r0 * row_bytes, row_bytes, rows, pack, pack_stride, k, out);
    };
  };
  RunAll(make_run, n * row_bytes, x, m, n, k, bias, y);
}

}  // namespace

void AmxLinear(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k,
               const float* bias, float* y) {
  TANDEM_CHECK(AmxUsable());
  TANDEM_CHECK(AmxLinearFits(m, k));
  // The weight tiles in place; the last, partial item from a zero-padded
  // copy of its rows.
  auto make_run = [w, k](const uint8_t* pack, int64_t pack_stride) {
    return [=]<int MT>(int64_t r0, int64_t rows, int nb, float* out) {
      const uint16_t* a0 = w + r0 * k;
      bool prefetch = true;
      if (rows % kTileRows != 0) {
        a0 = reinterpret_cast<const uint16_t*>(PaddedRows(a0, rows, nb * kTileRows, k * 2));
        prefetch = false;
      }
      RunItem<MT>(nb, a0, a0 + kTileRows * k, k * 2, pack, pack_stride, k, prefetch, out);
    };
  };
  RunAll(make_run, n * k * 2, x, m, n, k, bias, y);
}

void AmxQuantLinear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                    const float* bias, float* y) {
  TANDEM_CHECK(AmxUsable());
  TANDEM_CHECK(AmxLinearFits(m, k));
  WithBlockType(t, [&](auto type) {
    AmxQuantLinearOf<decltype(type)::value>(x, m, static_cast<const uint8_t*>(w), n, k, bias, y);
  });
}

void AmxQuantInt8Linear(const float* x, int64_t m, const void* w, DType t, int64_t n, int64_t k,
                        const float* bias, float* y) {
  TANDEM_CHECK(AmxInt8Usable());
  TANDEM_CHECK(AmxLinearFits(m, k));
  WithBlockType(t, [&](auto type) {
    AmxQuantInt8LinearOf<decltype(type)::value>(x, m, static_cast<const uint8_t*>(w), n, k, bias,
                                               y);
  });
}

}  // namespace tandem::ops::internal
