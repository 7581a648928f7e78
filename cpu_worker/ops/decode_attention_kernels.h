// What the decode-attention driver (decode_attention.cc) shares with its
// kernels in other files: a tile's runs, the prefetch hint, and the AVX2
// kernel (decode_attention_avx2.cc). Internal to ops.
#ifndef TANDEM_CPU_WORKER_OPS_DECODE_ATTENTION_KERNELS_H_
#define TANDEM_CPU_WORKER_OPS_DECODE_ATTENTION_KERNELS_H_

#include <cstdint>

namespace tandem::ops::internal::attention {

// Tokens per tile (at most): the kernels' score buffers hold this many.
inline constexpr int64_t kMaxTile = 32;

// A run: up to 16 consecutive tokens of one kv head within one block —
// their keys are columns [0, n) of `k` (transposed, `kstride` floats
// between dimensions) and their values the n rows at `v`, head_dim floats
// apart. A tile is two runs (the second may be empty): 16-token blocks pair
// up, so that each broadcast of q and each pass over the accumulators
// serves 32 tokens.
struct Run {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t n = 0;
};

// The kernels prefetch the rows the next call reads while they read their
// own, a cache line for a line (why, and why to L2: decode_attention.cc).
inline void Prefetch(const float* p) { __builtin_prefetch(p, 0, 1); }  // prefetcht2
inline void PrefetchRow(const float* p, int64_t hd) {
  for (int64_t d = 0; d < hd; d += 16) Prefetch(p + d);
}
// The lines of a tile's transposed keys (`count` keys from `kt`, `kstride`
// floats between dimensions).
inline void PrefetchKeys(const float* kt, int64_t kstride, int64_t hd, int64_t count) {
  for (int64_t d = 0; d < hd; ++d) {
    for (int64_t j = 0; j < count; j += 16) Prefetch(kt + d * kstride + j);
  }
}

// A sequence's queries as the vector kernels read them: per kv head, its
// group's heads in slices of 4, each slice dimension-major: the slice of
// heads g0 .. g0 + G (G <= 4) at out + (kvh * group + g0) * hd holds
// q[g0 + g][d] at [d * G + g], so that one step's broadcasts come from one
// pointer at constant offsets. q and out are [heads, hd]. Requires AVX2.
void QueryByDimensionAvx2(const float* q, int64_t kv_heads, int64_t group, int64_t hd,
                              float* out);

// Whether the AVX2 kernel takes a run: whole vectors of 8 keys (a run of 8
// or 16) and a head_dim of whole vectors. Other runs go to the portable
// kernel (the state it keeps is the same).
inline bool Avx2TakesRun(const Run& r, int64_t hd) {
  return hd % 8 == 0 && (r.n == 8 || r.n == 16);
}

// One tile of one kv head for its `group` query heads (q: theirs in
// QueryByDimensionAvx2's form), both runs (r[1] may be empty; every
// non-empty run Avx2TakesRun), updating each head's online-softmax state
// at state + g * sd: acc [hd], then m, then l (the portable kernel's
// layout). The next call's runs (`next`) are prefetched alongside.
// Requires AVX2 and FMA (KernelIsa::kAvx2).
void TileAvx2(const float* q, int64_t group, int64_t hd, const Run (&r)[2], int64_t kstride,
              float scale, float* state, int64_t sd, const Run (&next)[2]);

}  // namespace tandem::ops::internal::attention

#endif  // TANDEM_CPU_WORKER_OPS_DECODE_ATTENTION_KERNELS_H_
