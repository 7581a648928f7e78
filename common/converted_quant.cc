#include "common/converted_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/quant.h"

namespace tandem {
namespace {

// Superblock layouts, as ggml-common.h declares them (QK_K = 256).
struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per 16 elements
  uint8_t qs[64];      // 2-bit quants
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];   // the quants' high bits
  uint8_t qs[64];      // their low 2 bits
  uint8_t scales[12];  // 16 signed 6-bit scales, packed
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 scales and 8 mins of 6 bits, packed
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // the quants' fifth bits
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // per 16 elements
  uint16_t d;
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // fifth bits: element j in bit j
  uint8_t qs[16];  // element j in the low nibble of qs[j], j + 16 in the high
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];  // indices into kIq4nlValues, laid out as Q4_0's nibbles
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;    // sub-block ib's scale: high 2 bits at bit 2 ib
  uint8_t scales_l[4];  // low 4 bits: nibble ib % 2 of byte ib / 2
  uint8_t qs[128];      // per 32-element sub-block, 16 bytes laid out as IQ4_NL's
};
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// IQ4_NL's non-linear 4-bit grid (ggml's kvalues_iq4nl).
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// The 5-bit quants of Q5_0/Q5_1: element j < 16 from the low nibble of qs[j] and bit j
// of qh, element j + 16 from the high nibble and bit j + 16.
void Q5Quants(const uint8_t qh_bytes[4], const uint8_t qs[16], int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    q[j + 16] = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
  }
}

void DequantQ5_0(const BlockQ5_0& b, float* y) {
  const float d = F16ToF32(b.d);
  int q[32];
  Q5Quants(b.qh, b.qs, q);
  for (int j = 0; j < 32; ++j) y[j] = (q[j] - 16) * d;
}

void DequantQ5_1(const BlockQ5_1& b, float* y) {
  const float d = F16ToF32(b.d), m = F16ToF32(b.m);
  int q[32];
  Q5Quants(b.qh, b.qs, q);
  for (int j = 0; j < 32; ++j) y[j] = q[j] * d + m;
}

void DequantIQ4_NL(const BlockIQ4_NL& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4nlValues[b.qs[j] & 0xF];
    y[j + 16] = d * kIq4nlValues[b.qs[j] >> 4];
  }
}

// Sub-block ib's signed 6-bit scale of IQ4_XS.
int Iq4xsScale(const BlockIQ4_XS& b, int ib) {
  const int ls =
      ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
  return ls - 32;
}

void DequantIQ4_XS(const BlockIQ4_XS& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float dl = d * Iq4xsScale(b, ib);
    const uint8_t* qs = b.qs + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4nlValues[qs[j] & 0xF];
      y[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
    }
  }
}

// Scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 packed bytes: j < 4 keep
// theirs in the low 6 bits of bytes j and j + 4; j >= 4 split theirs between a nibble
// of byte j + 4 and the top 2 bits of bytes j - 4 and j.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void DequantQ2_K(const BlockQ2_K& b, float* y) {
  const float d = F16ToF32(b.d), min = F16ToF32(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b.scales[is++];
        const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void DequantQ3_K(const BlockQ3_K& b, float* y) {
  // Unpack the 16 6-bit scales: low 4 bits from bytes 0..7 (nibbles), high 2 bits from
  // bytes 8..11.
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (b.scales[j] & 0xF) : (b.scales[j - 8] >> 4);
    const int high = (b.scales[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  const float d_all = F16ToF32(b.d);
  const uint8_t* q = b.qs;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l) {
          const int i = l + 16 * half;
          *y++ = dl * (((q[i] >> shift) & 3) - ((b.hmask[i] & m) ? 0 : 4));
        }
      }
      m <<= 1;
    }
    q += 32;
  }
}

void DequantQ4_K(const BlockQ4_K& b, float* y) {
  const float d = F16ToF32(b.d), min = F16ToF32(b.dmin);
  const uint8_t* q = b.qs;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, m;
    ScaleMinK4(j, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(j + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
  }
}

void DequantQ5_K(const BlockQ5_K& b, float* y) {
  const float d = F16ToF32(b.d), min = F16ToF32(b.dmin);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, m;
    ScaleMinK4(j, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(j + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void DequantQ6_K(const BlockQ6_K& b, float* y) {
  const float d = F16ToF32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

bool FitsF16(float x) { return std::isfinite(x) && std::fabs(x) < 65504.0f; }

// Q4_K's sub-blocks are Q4_1 blocks with f32 scales: round those to f16 and repack
// the nibbles (Q4_K keeps sub-block 2c in the low nibbles of qs[32c..32c+31] and 2c+1
// in the high ones; Q4_1 keeps element i in the low nibble of qs[i], i + 16 in the high).
absl::Status ConvertQ4_K(const uint8_t* src, int64_t first, int64_t last, BlockQ4_1* dst) {
  for (int64_t k = first; k < last; ++k) {
    BlockQ4_K b;  // copied out: the mapping's blocks need not be aligned
    std::memcpy(&b, src + k * static_cast<int64_t>(sizeof b), sizeof b);
    const float d = F16ToF32(b.d), min = F16ToF32(b.dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      ScaleMinK4(j, b.scales, &sc, &m);
      const float scale = d * sc, offset = -(min * m);
      if (!FitsF16(scale) || !FitsF16(offset)) {
        return absl::InvalidArgumentError(absl::StrCat("Q4_K block ", k, ": sub-block ", j,
                                                       " has scale ", scale, " and min ", -offset,
                                                       ", which f16 cannot hold"));
      }
      BlockQ4_1& o = dst[k * 8 + j];
      o.d = F32ToF16(scale);
      o.m = F32ToF16(offset);
      const uint8_t* q = b.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int i = 0; i < 16; ++i) {
        const uint8_t lo = (q[i] >> shift) & 0xF, hi = (q[i + 16] >> shift) & 0xF;
        o.qs[i] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<ConvertedQuant> ConvertedQuantFromGgmlType(uint32_t ggml_type) {
  switch (ggml_type) {
    case 6:
    case 7:
    case 10:
    case 11:
    case 12:
    case 13:
    case 14:
    case 20:
    case 23:
      return static_cast<ConvertedQuant>(ggml_type);
    default:
      return std::nullopt;
  }
}

std::string_view ConvertedQuantName(ConvertedQuant t) {
  switch (t) {
    case ConvertedQuant::kQ5_0:
      return "Q5_0";
    case ConvertedQuant::kQ5_1:
      return "Q5_1";
    case ConvertedQuant::kQ2_K:
      return "Q2_K";
    case ConvertedQuant::kQ3_K:
      return "Q3_K";
    case ConvertedQuant::kQ4_K:
      return "Q4_K";
    case ConvertedQuant::kQ5_K:
      return "Q5_K";
    case ConvertedQuant::kQ6_K:
      return "Q6_K";
    case ConvertedQuant::kIQ4_NL:
      return "IQ4_NL";
    case ConvertedQuant::kIQ4_XS:
      return "IQ4_XS";
  }
  return "?";
}

int64_t ConvertedQuantBlockElems(ConvertedQuant t) {
  switch (t) {
    case ConvertedQuant::kQ5_0:
    case ConvertedQuant::kQ5_1:
    case ConvertedQuant::kIQ4_NL:
      return 32;
    default:
      return 256;
  }
}

int64_t ConvertedQuantBlockBytes(ConvertedQuant t) {
  switch (t) {
    case ConvertedQuant::kQ5_0:
      return sizeof(BlockQ5_0);
    case ConvertedQuant::kQ5_1:
      return sizeof(BlockQ5_1);
    case ConvertedQuant::kQ2_K:
      return sizeof(BlockQ2_K);
    case ConvertedQuant::kQ3_K:
      return sizeof(BlockQ3_K);
    case ConvertedQuant::kQ4_K:
      return sizeof(BlockQ4_K);
    case ConvertedQuant::kQ5_K:
      return sizeof(BlockQ5_K);
    case ConvertedQuant::kQ6_K:
      return sizeof(BlockQ6_K);
    case ConvertedQuant::kIQ4_NL:
      return sizeof(BlockIQ4_NL);
    case ConvertedQuant::kIQ4_XS:
      return sizeof(BlockIQ4_XS);
  }
  return 0;
}

DType ConvertedQuantComputeType(ConvertedQuant t) {
  return t == ConvertedQuant::kQ4_K ? DType::kQ4_1 : DType::kQ8_0;
}

namespace {

// Copies block k out (blocks of 110, 210, 22 or 18 bytes leave the f16 fields
// unaligned) and dequantizes it.
template <typename Block>
void DequantBlock(const uint8_t* bytes, int64_t k, void (*dequant)(const Block&, float*),
                  float* y) {
  Block b;
  std::memcpy(&b, bytes + k * static_cast<int64_t>(sizeof(Block)), sizeof b);
  dequant(b, y);
}

// The int8 quants the exact conversions to Q8_0 keep, with the block's f16 scale.
void ExactQ8_0(ConvertedQuant t, const uint8_t* bytes, int64_t k, BlockQ8_0* o) {
  if (t == ConvertedQuant::kQ5_0) {
    BlockQ5_0 b;
    std::memcpy(&b, bytes + k * static_cast<int64_t>(sizeof b), sizeof b);
    int q[32];
    Q5Quants(b.qh, b.qs, q);
    o->d = b.d;
    for (int j = 0; j < 32; ++j) o->qs[j] = static_cast<int8_t>(q[j] - 16);
  } else {
    BlockIQ4_NL b;
    std::memcpy(&b, bytes + k * static_cast<int64_t>(sizeof b), sizeof b);
    o->d = b.d;
    for (int j = 0; j < 16; ++j) {
      o->qs[j] = kIq4nlValues[b.qs[j] & 0xF];
      o->qs[j + 16] = kIq4nlValues[b.qs[j] >> 4];
    }
  }
}

}  // namespace

void DequantizeConverted(ConvertedQuant t, const void* src, int64_t n, float* dst) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  const int64_t per = ConvertedQuantBlockElems(t);
  for (int64_t k = 0; k < n / per; ++k, dst += per) {
    switch (t) {
      case ConvertedQuant::kQ5_0:
        DequantBlock<BlockQ5_0>(bytes, k, DequantQ5_0, dst);
        break;
      case ConvertedQuant::kQ5_1:
        DequantBlock<BlockQ5_1>(bytes, k, DequantQ5_1, dst);
        break;
      case ConvertedQuant::kQ2_K:
        DequantBlock<BlockQ2_K>(bytes, k, DequantQ2_K, dst);
        break;
      case ConvertedQuant::kQ3_K:
        DequantBlock<BlockQ3_K>(bytes, k, DequantQ3_K, dst);
        break;
      case ConvertedQuant::kQ4_K:
        DequantBlock<BlockQ4_K>(bytes, k, DequantQ4_K, dst);
        break;
      case ConvertedQuant::kQ5_K:
        DequantBlock<BlockQ5_K>(bytes, k, DequantQ5_K, dst);
        break;
      case ConvertedQuant::kQ6_K:
        DequantBlock<BlockQ6_K>(bytes, k, DequantQ6_K, dst);
        break;
      case ConvertedQuant::kIQ4_NL:
        DequantBlock<BlockIQ4_NL>(bytes, k, DequantIQ4_NL, dst);
        break;
      case ConvertedQuant::kIQ4_XS:
        DequantBlock<BlockIQ4_XS>(bytes, k, DequantIQ4_XS, dst);
        break;
    }
  }
}

namespace {

// Blocks [first, last) of the tensor; errors name blocks by their index in it.
absl::Status ConvertRange(ConvertedQuant t, const uint8_t* bytes, int64_t first, int64_t last,
                          uint8_t* dst) {
  if (t == ConvertedQuant::kQ4_K) {
    return ConvertQ4_K(bytes, first, last, reinterpret_cast<BlockQ4_1*>(dst));
  }
  auto* out = reinterpret_cast<BlockQ8_0*>(dst);
  if (t == ConvertedQuant::kIQ4_XS) {
    // Each 32-element sub-block is an IQ4_NL block whose scale d * (ls - 32) is
    // rounded to f16.
    for (int64_t k = first; k < last; ++k) {
      BlockIQ4_XS b;
      std::memcpy(&b, bytes + k * static_cast<int64_t>(sizeof b), sizeof b);
      const float d = F16ToF32(b.d);
      for (int ib = 0; ib < 8; ++ib) {
        const float dl = d * Iq4xsScale(b, ib);
        if (!FitsF16(dl)) {
          return absl::InvalidArgumentError(absl::StrCat("IQ4_XS block ", k, ": sub-block ", ib,
                                                         " has scale ", dl,
                                                         ", which f16 cannot hold"));
        }
        BlockQ8_0& o = out[k * 8 + ib];
        o.d = F32ToF16(dl);
        for (int j = 0; j < 16; ++j) {
          o.qs[j] = kIq4nlValues[b.qs[16 * ib + j] & 0xF];
          o.qs[j + 16] = kIq4nlValues[b.qs[16 * ib + j] >> 4];
        }
      }
    }
    return absl::OkStatus();
  }
  if (t == ConvertedQuant::kQ5_0 || t == ConvertedQuant::kIQ4_NL) {
    // The target keeps the stored f16 scale as it is; only a non-finite one is refused.
    for (int64_t k = first; k < last; ++k) {
      ExactQ8_0(t, bytes, k, &out[k]);
      if (const float d = F16ToF32(out[k].d); !std::isfinite(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(ConvertedQuantName(t)), " block ", k, " has the scale ", d));
      }
    }
    return absl::OkStatus();
  }
  // Through f32, one block at a time.
  const int64_t per = ConvertedQuantBlockElems(t);
  float values[256];
  for (int64_t k = first; k < last; ++k) {
    DequantizeConverted(t, bytes + k * ConvertedQuantBlockBytes(t), per, values);
    float amax = 0;
    bool finite = true;
    for (int64_t j = 0; j < per; ++j) {
      finite &= std::isfinite(values[j]);
      amax = std::max(amax, std::fabs(values[j]));
    }
    if (!finite || !FitsF16(amax / 127.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(ConvertedQuantName(t)), " block ", k, " holds ",
                       finite ? absl::StrCat("values up to ", amax) : "a value that is not finite",
                       ", which Q8_0's f16 scales cannot hold"));
    }
    QuantizeFromF32(DType::kQ8_0, values, per, out + k * (per / 32));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertQuantBlocks(ConvertedQuant t, const void* src, int64_t n, void* dst,
                                int threads) {
  const int64_t n_blocks = n / ConvertedQuantBlockElems(t);
  const auto* bytes = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  // Whole blocks per thread, and enough of them (1M elements) to be worth a thread.
  const int64_t per_thread = (1 << 20) / ConvertedQuantBlockElems(t);
  const int use = static_cast<int>(
      std::clamp<int64_t>(std::min<int64_t>(threads, n_blocks / per_thread), 1, 256));
  if (use == 1) return ConvertRange(t, bytes, 0, n_blocks, out);
  std::vector<absl::Status> status(static_cast<size_t>(use));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(use));
  for (int i = 0; i < use; ++i) {
    pool.emplace_back([&, i] {
      status[static_cast<size_t>(i)] =
          ConvertRange(t, bytes, n_blocks * i / use, n_blocks * (i + 1) / use, out);
    });
  }
  for (std::thread& th : pool) th.join();
  // The first failing range holds the first bad block.
  for (const absl::Status& st : status) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace tandem
