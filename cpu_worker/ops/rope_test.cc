#include "cpu_worker/ops/rope.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::ops {
namespace {

// Golden values from transformers 5.23 / torch 2.15 on CPU:
// LlamaRotaryEmbedding(LlamaConfig(head_dim=..., rope_parameters=...)).inv_freq
// as f32 bit patterns.
// Default128Theta1e4: head_dim 128, {"rope_type": "default", "rope_theta": 10000.0}
constexpr uint32_t kDefault128Theta1e4[] = {
    0x3f800000u, 0x3f5dafd7u, 0x3f3ff911u, 0x3f263de0u, 0x3f0ff59au, 0x3ef953cfu, 0x3ed7e89bu,
    0x3ebaf81bu, 0x3ea1e89bu, 0x3e8c3504u, 0x3e72d423u, 0x3e5247edu, 0x3e361887u, 0x3e1db040u,
    0x3e088d77u, 0x3dec7fd6u, 0x3dcccccdu, 0x3db15978u, 0x3d99940du, 0x3d84fe4du, 0x3d6655c2u,
    0x3d47763fu, 0x3d2cba15u, 0x3d159348u, 0x3d0186e3u, 0x3ce054d2u, 0x3cc2434fu, 0x3ca8398bu,
    0x3c91ad39u, 0x3c7c4d33u, 0x3c5a7bf2u, 0x3c3d3311u, 0x3c23d70au, 0x3c0de12du, 0x3bf5b9b0u,
    0x3bd4ca15u, 0x3bb8449cu, 0x3b9f91ccu, 0x3b8a2e77u, 0x3b6f520eu, 0x3b4f3e38u, 0x3b33770fu,
    0x3b1b690du, 0x3b06946fu, 0x3ae91528u, 0x3ac9d75cu, 0x3aaec98eu, 0x3a975c0eu, 0x3a83126fu,
    0x3a6301e2u, 0x3a44948cu, 0x3a2a3b44u, 0x3a136a16u, 0x39ff4facu, 0x39dd1725u, 0x39bf74d7u,
    0x39a5cb60u, 0x398f9272u, 0x3978a815u, 0x395753e4u, 0x393a7753u, 0x39217916u, 0x390bd472u,
    0x38f22ce2u,
};
// Default64Theta1e6: head_dim 64, {"rope_type": "default", "rope_theta": 1000000.0}
constexpr uint32_t kDefault64Theta1e6[] = {
    0x3f800000u, 0x3f263de0u, 0x3ed7e89bu, 0x3e8c3504u, 0x3e361887u, 0x3dec7fd6u, 0x3d99940du,
    0x3d47763fu, 0x3d0186e3u, 0x3ca8398bu, 0x3c5a7bf2u, 0x3c0de12du, 0x3bb8449cu, 0x3b6f520eu,
    0x3b1b690du, 0x3ac9d75cu, 0x3a83126fu, 0x3a2a3b44u, 0x39dd1725u, 0x398f9272u, 0x393a7753u,
    0x38f22ce2u, 0x389d43a4u, 0x384c3fbeu, 0x3804a2b2u, 0x37ac431du, 0x375fba4fu, 0x371148e3u,
    0x36bcb0c1u, 0x36751070u, 0x361f23e4u, 0x35ceaf79u,
};
// Llama3_128: head_dim 128, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
// "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
constexpr uint32_t kLlama3_128[] = {
    0x3f800000u, 0x3f508ac1u, 0x3f29e1c6u, 0x3f0a6384u, 0x3ee177bcu, 0x3eb7ab7du, 0x3e959ee3u,
    0x3e73c461u, 0x3e4693b0u, 0x3e21c3a0u, 0x3e03c6a0u, 0x3dd6b19cu, 0x3daee4adu, 0x3d8e7898u,
    0x3d681e67u, 0x3d3d1684u, 0x3d1a08c8u, 0x3cfaf53fu, 0x3ccc6f49u, 0x3ca68939u, 0x3c87a9c3u,
    0x3c5d06ecu, 0x3c340d6du, 0x3c12ac7fu, 0x3beef74fu, 0x3bc2aa76u, 0x3b9e9402u, 0x3b812e35u,
    0x3b527720u, 0x3b0dfd06u, 0x3ab3d11du, 0x3a60979eu, 0x3a0995d2u, 0x39a3f108u, 0x393b2dd2u,
    0x38c86886u, 0x38a3418du, 0x3884fdbfu, 0x3858ac81u, 0x38308199u, 0x380fc8f8u, 0x37ea426fu,
    0x37bed4f4u, 0x379b7475u, 0x377d45c3u, 0x374e51f5u, 0x3728126bu, 0x3708ea0fu, 0x36df10c4u,
    0x36b5b687u, 0x369406cbu, 0x36712b80u, 0x36447610u, 0x36200a69u, 0x36025f34u, 0x35d46808u,
    0x35ad07a7u, 0x358cf400u, 0x3565a54du, 0x353b12c7u, 0x351864a7u, 0x34f848c2u, 0x34ca41b0u,
    0x34a4c2ffu,
};
// Llama3_64: head_dim 64, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
// "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
constexpr uint32_t kLlama3_64[] = {
    0x3f800000u, 0x3f29e1c6u, 0x3ee177bcu, 0x3e959ee3u, 0x3e4693b0u, 0x3e03c6a0u, 0x3daee4adu,
    0x3d681e67u, 0x3d1a08c8u, 0x3ccc6f49u, 0x3c87a9c3u, 0x3c340d6du, 0x3beef74fu, 0x3b9e9402u,
    0x3b527720u, 0x3aa9279bu, 0x39e13620u, 0x38cb98f7u, 0x37a3418du, 0x3758ac81u, 0x370fc8f8u,
    0x36bed4f4u, 0x367d45c3u, 0x3628126bu, 0x35df10c4u, 0x359406cbu, 0x35447610u, 0x35025f34u,
    0x34ad07a7u, 0x3465a54du, 0x341864a7u, 0x33ca41b0u,
};
// Linear128: head_dim 128, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}
constexpr uint32_t kLinear128[] = {
    0x3e800000u, 0x3e5dafd7u, 0x3e3ff911u, 0x3e263de0u, 0x3e0ff59au, 0x3df953cfu, 0x3dd7e89bu,
    0x3dbaf81bu, 0x3da1e89bu, 0x3d8c3504u, 0x3d72d423u, 0x3d5247edu, 0x3d361887u, 0x3d1db040u,
    0x3d088d77u, 0x3cec7fd6u, 0x3ccccccdu, 0x3cb15978u, 0x3c99940du, 0x3c84fe4du, 0x3c6655c2u,
    0x3c47763fu, 0x3c2cba15u, 0x3c159348u, 0x3c0186e3u, 0x3be054d2u, 0x3bc2434fu, 0x3ba8398bu,
    0x3b91ad39u, 0x3b7c4d33u, 0x3b5a7bf2u, 0x3b3d3311u, 0x3b23d70au, 0x3b0de12du, 0x3af5b9b0u,
    0x3ad4ca15u, 0x3ab8449cu, 0x3a9f91ccu, 0x3a8a2e77u, 0x3a6f520eu, 0x3a4f3e38u, 0x3a33770fu,
    0x3a1b690du, 0x3a06946fu, 0x39e91528u, 0x39c9d75cu, 0x39aec98eu, 0x39975c0eu, 0x3983126fu,
    0x396301e2u, 0x3944948cu, 0x392a3b44u, 0x39136a16u, 0x38ff4facu, 0x38dd1725u, 0x38bf74d7u,
    0x38a5cb60u, 0x388f9272u, 0x3878a815u, 0x385753e4u, 0x383a7753u, 0x38217916u, 0x380bd472u,
    0x37f22ce2u,
};

// HF LlamaRotaryEmbedding + apply_rotary_pos_emb, llama3 scaling above,
// positions 7, 8191, 131071, x[t][d] = ((t * 131 + d * 29) % 97 - 48) / 16.
constexpr float kLlama3RopeOut[] = {
    -0.824548602f,    -1.19851637f,  1.39230132f,    -3.63668919f,   1.8683356f,     -0.478995979f,
    -3.16323638f,     1.85020554f,   -0.315575898f,  -1.25516725f,   3.62654209f,    -0.635282159f,
    -0.308906436f,    3.44426298f,   -1.3188858f,    -0.297430187f,  1.02292049f,    -2.08363533f,
    -0.69876194f,     0.838844538f,  3.18525696f,    -1.25950587f,   0.397654563f,   2.49192142f,
    -1.87757123f,     -0.153473452f, 1.60185814f,    -2.51323771f,   -0.751215398f,  1.0339427f,
    2.8976748f,       -1.37160182f,  0.432904661f,   2.25656128f,    -1.99851465f,   -0.187918037f,
    1.62367153f,      -2.6241951f,   -0.81249994f,   0.999466002f,   2.81308484f,    -1.43737781f,
    0.374810904f,     2.1871109f,    -2.06236792f,   -0.250048429f,  1.56233346f,    -2.68739295f,
    -0.874997079f,    0.93743366f,   2.75007725f,    -1.49998271f,   0.312476933f,   2.12495089f,
    -2.12498212f,     -0.312505543f, 1.49997914f,    -2.74998569f,   -0.937499225f,  0.874991775f,
    2.68751025f,      -1.56249762f,  0.249997199f,   2.0624938f,     -3.620121f,     0.338141471f,
    -0.720089018f,    0.791234732f,  0.891335249f,   -0.656291962f,  0.411966681f,   -2.27129269f,
    -0.571133196f,    1.95824194f,   0.954302192f,   -1.16203392f,   1.45313728f,    -1.42944193f,
    -1.704427f,       0.691333175f,  2.92959738f,    -2.18085313f,   0.00360957533f, 2.07746744f,
    -1.95721769f,     -0.621531367f, 1.34704387f,    -2.78691435f,   -1.22239828f,   0.681708992f,
    2.55572033f,      -1.82003927f,  0.0456255376f,  1.89089775f,    -2.34728146f,   -0.570736051f,
    1.25159883f,      -2.99506783f,  -1.18999815f,   0.624874473f,   2.43838525f,    -1.81366503f,
    -0.000293810968f, 1.81279445f,   -2.43682504f,   -0.625280976f,  1.18755972f,    3.00028372f,
    -1.25021791f,     0.562478483f,  2.37510967f,    -1.87515354f,   -0.0625407174f, 1.75003552f,
    -2.49991512f,     -0.68753773f,  1.12500644f,    2.93753552f,    -1.31252885f,   0.499996543f,
    2.31251359f,      -1.93752027f,  -0.125005618f,  1.68750429f,    -2.56248927f,   -0.750005066f,
    1.06250072f,      2.87500453f,   0.517903745f,   1.28626812f,    3.68270159f,    -0.414368927f,
    -0.258967757f,    1.2226727f,    -2.3876636f,    -0.267891586f,  2.68427181f,    -3.27314806f,
    -0.194000959f,    0.972637296f,  1.02009618f,    -0.109378517f,  0.921975017f,   -1.74676275f,
    -1.94912839f,     -0.174994722f, -0.946286201f,  2.78973985f,    0.748973012f,   0.146348536f,
    1.11673903f,      0.065068841f,  -0.14337486f,   2.74255276f,    2.15352368f,    -0.568240404f,
    -1.48237085f,     -3.13702178f,  -0.496955335f,  -0.490531385f,  -3.49049544f,   1.89099002f,
    -0.918419838f,    -0.565742612f, -0.965146244f,  -0.589171648f,  0.324164927f,   -2.04664898f,
    -0.994339526f,    0.329465002f,  2.96618891f,    -1.58811772f,   -0.0458981805f, 1.59524155f,
    -2.23893952f,     -0.577942491f, 1.13589406f,    -2.90004754f,   -1.17317712f,   0.582421005f,
    2.50423408f,      -1.79262161f,  -0.0129284365f, 1.77832162f,    -2.42020512f,   -0.626589715f,
    1.17345619f,      3.01279473f,   -1.2479521f,    0.557287395f,   2.38386035f,    -1.87232316f,
    0.708030403f,     1.51225674f,   -0.500208139f,  1.59717083f,    1.13851523f,    -3.41315126f,
    -0.733037531f,    -0.52525264f,  -0.626371086f,  -0.776471257f,  0.925686181f,   -1.63317418f,
    3.57049942f,      1.72972322f,   0.584267259f,   3.07706881f,    -1.6960777f,    0.549006462f,
    -2.49668741f,     2.03162694f,   0.6886186f,     -1.81090117f,   3.54035926f,    1.8156395f,
    -1.00727344f,     -2.09488916f,  -1.57836699f,   -0.0955724567f, 2.11621308f,    1.63665056f,
    0.971823931f,     1.66231322f,   -1.26708519f,   -0.193488896f,  0.225911871f,   3.31607318f,
    -2.58188868f,     0.0230872333f, 2.4765296f,     -2.99261761f,   -0.612021506f,  1.61682069f,
    -2.23924637f,     -1.19133878f,  0.876027763f,   2.86242676f,    -1.75190783f,   0.211869627f,
    2.12747526f,      -2.31837893f,  -0.417656034f,  1.4552722f,     -2.75324798f,   -1.03521204f,
    0.812397122f,     2.64827371f,   -1.650648f,     0.182116836f,   2.00827217f,    -2.23283839f,
    -0.443307906f,    1.37712097f,   -2.86765742f,   -1.06720996f,   0.163956523f,   3.71237135f,
    -0.614777088f,    1.54432321f,   1.70133007f,    1.72677922f,    -0.237094685f,  2.5972929f,
    2.71201086f,      0.418593347f,  -1.24177539f,   -0.378554106f,  1.32073033f,    -1.05415797f,
    3.69351792f,      -1.80719173f,  -0.0117955096f, 0.789403617f,   1.29721498f,    -0.666367769f,
    -1.5645963f,      -1.42128456f,  0.484659523f,   1.31086087f,    3.72301412f,    -2.23515844f,
    0.0795306861f,    -2.36844563f,  -2.64018917f,   -0.308732986f,  0.489524543f,   0.291643262f,
    -1.48243487f,     -0.253119111f, -3.32839251f,   -2.04693532f,   0.572422802f,   -2.90475368f,
    -1.46928811f,     -0.584766924f, 1.55176198f,    -3.65093899f,   1.51866174f,    -1.06015909f,
    -3.62159443f,     1.33362401f,   -0.607644141f,  -1.33223999f,   -0.295472145f,  -0.622943819f,
    -0.171346188f,    3.58504105f,   -1.13354802f,   -0.0485932231f, 1.31656146f,    -1.8091495f,
    -0.392134488f,    1.16850424f,   -2.51593137f,   -0.922189534f,  0.747127414f,   2.83779716f,
    -1.5235765f,      0.207070529f,  -2.40614319f,   0.0587675571f,  -1.082973f,     0.268508911f,
    3.31014156f,      -1.14166117f,  0.77713728f,    1.85198581f,    -1.10771275f,   -0.500560522f,
    -1.96676135f,     -3.73084402f,  -0.0978670418f, 1.04679632f,    0.513980269f,   -1.1741333f,
    -0.75250721f,     3.00095797f,   2.72302961f,    -0.210321814f,  -1.60361147f,   3.45781898f,
    -1.31824172f,     -0.504281759f, -0.340187788f,  -0.153617799f,  0.694230616f,   1.8676511f,
    -1.63043189f,     -0.686360121f, -2.09878469f,   -3.71768665f,   -0.0970475674f, -1.29993737f,
    -1.72751307f,     -1.10463238f,  -0.313230574f,  0.38004756f,    -2.83142614f,   0.564095616f,
    -1.37010622f,     0.72263813f,   0.388198078f,   -0.653332949f,  0.818053484f,   -2.0094409f,
    -0.098360613f,    2.51140761f,   -3.26358366f,   -0.617634416f,  1.97788954f,    -0.979786396f,
    -1.19905186f,     1.16658473f,   3.37804627f,    -1.72199273f,   0.440325767f,   2.49644828f,
    -2.23304653f,     -0.209994584f, 1.74787927f,    -2.3949883f,    -0.826208651f,  1.07169402f,
};

RopeScaling Llama3Scaling(float factor) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = factor;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position = 8192;
  return s;
}

RopeScaling LinearScaling(float factor) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLinear;
  s.factor = factor;
  return s;
}

template <size_t N>
void ExpectBitsEqual(const std::vector<float>& got, const uint32_t (&want)[N],
                     const std::string& what) {
  ASSERT_EQ(got.size(), N) << what;
  for (size_t i = 0; i < N; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), want[i])
        << what << " inv_freq[" << i << "] = " << got[i] << ", transformers "
        << std::bit_cast<float>(want[i]);
  }
}

TEST(RopeInvFreqTest, MatchesTransformersBitForBit) {
  ExpectBitsEqual(RopeInvFreq(128, 10000.0f, RopeScaling{}), kDefault128Theta1e4, "default 128");
  ExpectBitsEqual(RopeInvFreq(64, 1000000.0f, RopeScaling{}), kDefault64Theta1e6, "default 64");
  ExpectBitsEqual(RopeInvFreq(128, 500000.0f, Llama3Scaling(8.0f)), kLlama3_128, "llama3 128");
  ExpectBitsEqual(RopeInvFreq(64, 500000.0f, Llama3Scaling(32.0f)), kLlama3_64, "llama3 64");
  ExpectBitsEqual(RopeInvFreq(128, 10000.0f, LinearScaling(4.0f)), kLinear128, "linear 128");
}

TEST(RopeInvFreqTest, Llama3KeepsHighAndScalesLowFrequencies) {
  const auto plain = RopeInvFreq(128, 500000.0f, RopeScaling{});
  const auto scaled = RopeInvFreq(128, 500000.0f, Llama3Scaling(8.0f));
  ASSERT_EQ(plain.size(), scaled.size());
  EXPECT_EQ(scaled.front(), plain.front());       // wavelength 2*pi: untouched
  EXPECT_EQ(scaled.back(), plain.back() / 8.0f);  // longest wavelength: / factor
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_LE(scaled[i], plain[i]) << i;
    EXPECT_GE(scaled[i], plain[i] / 8.0f) << i;
  }
}

TEST(ApplyRopeTest, MatchesTransformersLlama3) {
  const auto inv = RopeInvFreq(128, 500000.0f, Llama3Scaling(8.0f));
  const int64_t positions[] = {7, 8191, 131071};
  std::vector<float> x(3 * 128);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t d = 0; d < 128; ++d) {
      x[static_cast<size_t>(t * 128 + d)] =
          static_cast<float>((t * 131 + d * 29) % 97 - 48) / 16.0f;
    }
  }
  ApplyRope(x.data(), 3, 1, 128, positions, inv, RopeStyle::kNeox);
  // torch evaluates cos/sin with SLEEF (within 1 ulp), glibc may round the
  // other way (9 of these 384 values differ by an ulp): allow a few ulps.
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], kLlama3RopeOut[i], 1e-6f) << "element " << i;
  }
}

// Plain reference: cos/sin in double of the f32 angle.
void ReferenceRope(std::vector<float>& x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   const std::vector<int64_t>& pos, const std::vector<float>& inv,
                   RopeStyle style) {
  const int64_t half = static_cast<int64_t>(inv.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x.data() + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float angle =
            static_cast<float>(pos[static_cast<size_t>(t)]) * inv[static_cast<size_t>(i)];
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const int64_t i0 = style == RopeStyle::kNeox ? i : 2 * i;
        const int64_t i1 = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
        const double a = v[i0], b = v[i1];
        v[i0] = static_cast<float>(a * c - b * s);
        v[i1] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

TEST(ApplyRopeTest, MatchesReferenceOnRandomInputs) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pos_dist(0, 40000);
  struct Case {
    int64_t tokens, heads, head_dim, rotary_dim;
  };
  for (const Case& c : {Case{1, 1, 2, 2}, Case{3, 4, 64, 64}, Case{17, 3, 128, 128},
                        Case{5, 2, 96, 32}, Case{64, 2, 80, 80}}) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      SCOPED_TRACE(absl::StrCat("tokens ", c.tokens, " heads ", c.heads, " head_dim ", c.head_dim,
                                " rotary ", c.rotary_dim, " style ",
                                style == RopeStyle::kNeox ? "neox" : "interleaved"));
      const auto inv = RopeInvFreq(c.rotary_dim, 10000.0f, RopeScaling{});
      std::vector<int64_t> pos(static_cast<size_t>(c.tokens));
      for (auto& p : pos) p = pos_dist(rng);
      std::vector<float> x(static_cast<size_t>(c.tokens * c.heads * c.head_dim));
      for (auto& v : x) v = dist(rng);
      std::vector<float> ref = x;
      ApplyRope(x.data(), c.tokens, c.heads, c.head_dim, pos.data(), inv, style);
      ReferenceRope(ref, c.tokens, c.heads, c.head_dim, pos, inv, style);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(x[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << "element " << i;
      }
    }
  }
}

TEST(ApplyRopeTest, PositionZeroIsIdentity) {
  const auto inv = RopeInvFreq(64, 10000.0f, RopeScaling{});
  std::vector<float> x(2 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 7.0f;
  const std::vector<float> before = x;
  const int64_t pos = 0;
  ApplyRope(x.data(), 1, 2, 64, &pos, inv, RopeStyle::kNeox);
  EXPECT_EQ(x, before);
}

// llama.cpp's convert_hf_to_gguf permutes the rows of q/k projections within
// each head: reshape(n_head, 2, d/2, ...).swapaxes(1, 2), i.e. new dim 2i + j
// holds old dim j * d/2 + i. Rotating the permuted head with interleaved
// pairs must give the permutation of the rotate-half result, bit for bit.
TEST(ApplyRopeTest, InterleavedOnPermutedHeadEqualsPermutedNeox) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t tokens = 5, heads = 3, d = 64;
  const auto inv = RopeInvFreq(d, 500000.0f, Llama3Scaling(8.0f));
  std::vector<int64_t> pos = {0, 1, 9, 1000, 100000};
  std::vector<float> x(static_cast<size_t>(tokens * heads * d));
  for (auto& v : x) v = dist(rng);
  auto permute = [&](const std::vector<float>& in) {
    std::vector<float> out(in.size());
    for (int64_t r = 0; r < tokens * heads; ++r) {
      for (int64_t i = 0; i < d / 2; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          out[static_cast<size_t>(r * d + 2 * i + j)] =
              in[static_cast<size_t>(r * d + j * d / 2 + i)];
        }
      }
    }
    return out;
  };
  std::vector<float> permuted = permute(x);
  ApplyRope(x.data(), tokens, heads, d, pos.data(), inv, RopeStyle::kNeox);
  ApplyRope(permuted.data(), tokens, heads, d, pos.data(), inv, RopeStyle::kInterleaved);
  EXPECT_EQ(permuted, permute(x));
}

}  // namespace
}  // namespace tandem::ops
