#include "common/gguf.h"

#include <cstring>

#include "common/testing/checkpoint_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using tandem::testing::GgufMetadata;
using tandem::testing::TestTensor;
using ::testing::HasSubstr;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tandem::testing::MakeTempDir("gguf_test"); }
  void TearDown() override { tandem::testing::RemoveTree(dir_); }
  std::string Write(const std::string& bytes, const std::string& name = "m.gguf") {
    const std::string p = dir_ + "/" + name;
    EXPECT_TRUE(tandem::testing::WriteFileBytes(p, bytes).ok());
    return p;
  }
  std::string dir_;
};

TEST_F(GgufTest, MetadataOfEveryValueTypeRoundTrips) {
  using namespace tandem::testing;  // NOLINT
  GgufMetadata m = {
      {"u8", GgufInt(GgufType::kUint8, 250)},
      {"i8", GgufInt(GgufType::kInt8, -100)},
      {"u16", GgufInt(GgufType::kUint16, 65000)},
      {"i16", GgufInt(GgufType::kInt16, -32000)},
      {"u32", GgufUint32(4000000000u)},
      {"i32", GgufInt(GgufType::kInt32, -2000000000)},
      {"f32", GgufFloat32(1.5f)},
      {"bool", GgufBool(true)},
      {"str", GgufString("hello \xe2\x9c\x93")},
      {"u64", GgufInt(GgufType::kUint64, int64_t{1} << 40)},
      {"i64", GgufInt(GgufType::kInt64, -(int64_t{1} << 50))},
      {"f64", GgufFloat(GgufType::kFloat64, 2.25)},
      {"arr.u8", GgufIntArray(GgufType::kUint8, {1, 2, 255})},
      {"arr.i8", GgufIntArray(GgufType::kInt8, {-1, 127})},
      {"arr.u16", GgufIntArray(GgufType::kUint16, {7})},
      {"arr.i16", GgufIntArray(GgufType::kInt16, {-7, 8})},
      {"arr.u32", GgufIntArray(GgufType::kUint32, {1, 4000000000})},
      {"arr.i32", GgufIntArray(GgufType::kInt32, {-5, 6, 7})},
      {"arr.u64", GgufIntArray(GgufType::kUint64, {int64_t{1} << 33})},
      {"arr.i64", GgufIntArray(GgufType::kInt64, {-(int64_t{1} << 33)})},
      {"arr.bool", GgufIntArray(GgufType::kBool, {1, 0, 1})},
      {"arr.f32", GgufFloatArray(GgufType::kFloat32, {0.5, -1.25})},
      {"arr.f64", GgufFloatArray(GgufType::kFloat64, {1e-300})},
      {"arr.str", GgufStringArray({"a", "", "ccc"})},
      {"arr.empty", GgufIntArray(GgufType::kInt32, {})},
      {"arr.nested",
       GgufArrayOfArrays({GgufStringArray({"x", "y"}), GgufIntArray(GgufType::kInt32, {3})})},
  };
  const std::string p = Write(SerializeGguf(m, {}));
  auto f = GgufFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), m.size());
  EXPECT_EQ(*g.GetInt("u8"), 250);
  EXPECT_EQ(*g.GetInt("i8"), -100);
  EXPECT_EQ(*g.GetInt("u16"), 65000);
  EXPECT_EQ(*g.GetInt("i16"), -32000);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(*g.GetFloat("f32"), 1.5);
  EXPECT_EQ(*g.GetInt("bool"), 1);
  EXPECT_EQ(*g.GetString("str"), "hello \xe2\x9c\x93");
  EXPECT_EQ(*g.GetInt("u64"), int64_t{1} << 40);
  EXPECT_EQ(*g.GetInt("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(*g.GetFloat("f64"), 2.25);
  EXPECT_EQ(g.Find("f32")->type, GgufType::kFloat32);
  EXPECT_TRUE(g.Find("bool")->is_integer());
  EXPECT_TRUE(g.Find("f64")->is_float());
  // Scalars convert between numeric kinds.
  EXPECT_EQ(*g.GetFloat("u16"), 65000.0);
  EXPECT_FALSE(g.GetInt("f64").ok()) << "2.25 is not an integer";
  // Arrays keep their element kind.
  EXPECT_EQ(g.Find("arr.u8")->ints, (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(g.Find("arr.i8")->ints, (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(g.Find("arr.u16")->ints, (std::vector<int64_t>{7}));
  EXPECT_EQ(g.Find("arr.i16")->ints, (std::vector<int64_t>{-7, 8}));
  EXPECT_EQ(g.Find("arr.u32")->ints, (std::vector<int64_t>{1, 4000000000}));
  EXPECT_EQ(g.Find("arr.i32")->ints, (std::vector<int64_t>{-5, 6, 7}));
  EXPECT_EQ(g.Find("arr.u64")->ints, (std::vector<int64_t>{int64_t{1} << 33}));
  EXPECT_EQ(g.Find("arr.i64")->ints, (std::vector<int64_t>{-(int64_t{1} << 33)}));
  EXPECT_EQ(g.Find("arr.bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(g.Find("arr.f32")->floats, (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(g.Find("arr.f64")->floats, (std::vector<double>{1e-300}));
  EXPECT_EQ(g.Find("arr.str")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(g.Find("arr.str")->elem_type, GgufType::kString);
  EXPECT_EQ(g.Find("arr.str")->array_size(), 3u);
  EXPECT_EQ(g.Find("arr.empty")->array_size(), 0u);
  const GgufValue* nested = g.Find("arr.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem_type, GgufType::kArray);
  ASSERT_EQ(nested->array_size(), 2u);
  EXPECT_EQ(nested->items[0].strings, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(nested->items[1].ints, (std::vector<int64_t>{3}));
}

TEST_F(GgufTest, TypedLookupsReportAbsentAndWrongKinds) {
  using namespace tandem::testing;  // NOLINT
  const std::string p =
      Write(SerializeGguf({{"s", GgufString("x")}, {"f", GgufFloat32(0.5f)}}, {}));
  auto f = GgufFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->Find("nope"), nullptr);
  EXPECT_EQ((*f)->GetInt("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string((*f)->GetInt("nope").status().message()), HasSubstr(p));
  EXPECT_EQ((*f)->GetInt("s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetInt("f").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetFloat("s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetString("f").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string((*f)->GetString("f").status().message()), HasSubstr("FLOAT32"));
}

TEST_F(GgufTest, TensorsOfEverySupportedDTypeRoundTrip) {
  using tandem::testing::RandomValues;
  std::vector<TestTensor> ts = {
      TestTensor::FromF32("f32", {3, 5}, RandomValues(15, 1), DType::kF32),
      TestTensor::FromF32("f16", {2, 4}, RandomValues(8, 2), DType::kF16),
      TestTensor::FromF32("bf16", {7}, RandomValues(7, 3), DType::kBF16),
      TestTensor::FromF32("q8_0", {2, 64}, RandomValues(128, 4), DType::kQ8_0),
      TestTensor::FromF32("q4_0", {3, 32}, RandomValues(96, 5), DType::kQ4_0),
      TestTensor::FromF32("q4_1", {2, 3, 96}, RandomValues(576, 6), DType::kQ4_1),
      TestTensor::FromF32("i32", {4}, {1, -2, 3, 4}, DType::kI32),
  };
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u, 1u}) {
      SCOPED_TRACE(::testing::Message() << "version " << version << " alignment " << alignment);
      tandem::testing::GgufWriteOptions o;
      o.version = version;
      o.alignment = alignment;
      const std::string p = Write(tandem::testing::SerializeGguf({}, ts, o));
      auto f = GgufFile::Open(p);
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ((*f)->version(), version);
      EXPECT_EQ((*f)->alignment(), alignment);
      EXPECT_EQ((*f)->data_offset() % alignment, 0u);
      ASSERT_EQ((*f)->tensors().size(), ts.size());
      for (const TestTensor& t : ts) {
        const GgufTensorInfo* info = (*f)->FindTensor(t.name);
        ASSERT_NE(info, nullptr) << t.name;
        EXPECT_EQ(info->shape, t.shape) << t.name;
        EXPECT_EQ(info->dtype, t.dtype) << t.name;
        EXPECT_EQ(info->nbytes, static_cast<int64_t>(t.bytes.size())) << t.name;
        EXPECT_EQ(info->offset % alignment, 0u);
        const TensorView v = (*f)->View(*info);
        EXPECT_EQ(v.name, t.name);
        EXPECT_EQ(v.shape, t.shape);
        EXPECT_EQ(v.nbytes, info->nbytes);
        ASSERT_EQ(std::memcmp(v.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
      }
      EXPECT_EQ((*f)->FindTensor("absent"), nullptr);
    }
  }
}

// Builds the bytes by hand to pin the on-disk conventions independently of
// the test writer: ne[] is innermost-first, offsets are relative to the
// aligned data section.
TEST_F(GgufTest, HandBuiltFileReversesDimensions) {
  std::string b = "GGUF";
  auto put32 = [&b](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto put64 = [&b](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  put32(3);
  put64(1);  // tensors
  put64(0);  // kvs
  put64(1);
  b += "w";
  put32(2);  // n_dims
  put64(4);  // ne[0]: innermost (columns)
  put64(2);  // ne[1]: rows
  put32(0);  // F32
  put64(0);  // offset
  while (b.size() % 32 != 0) b.push_back('\0');
  for (int i = 0; i < 8; ++i) {
    const float x = static_cast<float>(i);
    b.append(reinterpret_cast<const char*>(&x), 4);
  }
  auto f = GgufFile::Open(Write(b));
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView v = (*f)->View(*(*f)->FindTensor("w"));
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(v.as<float>()[5], 5.0f);  // row 1, column 1
}

TEST_F(GgufTest, ZeroTensorsAndNoMetadataIsValid) {
  auto f = GgufFile::Open(Write(tandem::testing::SerializeGguf({}, {})));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->tensors().empty());
  EXPECT_TRUE((*f)->metadata().empty());
}

// A tensor in a format Tandem converts is described in the type it converts to; its
// stored bytes are the blocks' (GgufCheckpoint converts them: converted_quant_test.cc
// and the engine tests).
TEST_F(GgufTest, ConvertedTensorsAreDescribedInTheirComputeType) {
  using namespace tandem::testing;  // NOLINT
  TestTensor q4k{"q4k", DType::kQ4_1, {3, 512}, std::string(3 * 2 * 144, '\0')};
  TestTensor q6k{"q6k", DType::kQ8_0, {2, 256}, std::string(2 * 210, '\0')};
  TestTensor q50{"q5_0", DType::kQ8_0, {2, 64}, std::string(2 * 2 * 22, '\0')};
  TestTensor plain = TestTensor::FromF32("plain", {32}, RandomValues(32, 1));
  GgufWriteOptions o;
  o.type_overrides["q4k"] = 12;
  o.type_overrides["q6k"] = 14;
  o.type_overrides["q5_0"] = 6;
  auto f = GgufFile::Open(Write(SerializeGguf({}, {q4k, q6k, q50, plain}, o)));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensorInfo* a = (*f)->FindTensor("q4k");
  const GgufTensorInfo* b = (*f)->FindTensor("q6k");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->converted, ConvertedQuant::kQ4_K);
  EXPECT_EQ(a->dtype, DType::kQ4_1);
  EXPECT_EQ(a->nbytes, 3 * 2 * 144);
  EXPECT_EQ(b->converted, ConvertedQuant::kQ6_K);
  EXPECT_EQ(b->dtype, DType::kQ8_0);
  EXPECT_EQ(b->nbytes, 2 * 210);
  const TensorView va = (*f)->View(*a);
  EXPECT_EQ(va.data, nullptr);
  EXPECT_EQ(va.nbytes, 3 * 16 * 20);  // 16 Q4_1 blocks a row
  EXPECT_EQ((*f)->View(*b).nbytes, 2 * 8 * 34);
  EXPECT_EQ((*f)->StoredData(*b), (*f)->StoredData(*a) + 3 * 2 * 144);
  const GgufTensorInfo* c = (*f)->FindTensor("q5_0");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->converted, ConvertedQuant::kQ5_0);
  EXPECT_EQ(c->nbytes, 2 * 2 * 22);
  EXPECT_EQ((*f)->View(*c).nbytes, 2 * 2 * 34);
  EXPECT_EQ((*f)->FindTensor("plain")->converted, std::nullopt);
  EXPECT_NE((*f)->View(*(*f)->FindTensor("plain")).data, nullptr);
}

TEST_F(GgufTest, StructuralErrorsNameTheFile) {
  using namespace tandem::testing;  // NOLINT
  struct Case {
    const char* what;
    std::string bytes;
    absl::StatusCode code;
    const char* phrase;
  };
  const std::vector<TestTensor> two = {
      TestTensor::FromF32("a", {32}, RandomValues(32, 1)),
      TestTensor::FromF32("b", {32}, RandomValues(32, 2)),
  };
  GgufWriteOptions overlap;
  overlap.offset_overrides["b"] = 64;  // a is [0, 128)
  GgufWriteOptions past_end;
  past_end.offset_overrides["b"] = 1 << 20;
  GgufWriteOptions misaligned;
  misaligned.offset_overrides["b"] = 130;
  GgufWriteOptions q4k;
  q4k.type_overrides["b"] = 12;
  GgufWriteOptions iq2;
  iq2.type_overrides["b"] = 16;
  GgufWriteOptions unknown_type;
  unknown_type.type_overrides["b"] = 1000;
  std::string bad_dims =
      SerializeGguf({}, {TestTensor::FromF32("t", {1, 1, 1, 1, 32}, RandomValues(32, 1))});
  const std::vector<Case> cases = {
      {"empty file", "", absl::StatusCode::kInvalidArgument, "bad magic"},
      {"bad magic", "GGML" + std::string(40, '\0'), absl::StatusCode::kInvalidArgument,
       "bad magic"},
      {"version 1", SerializeGguf({}, {}, {1, 32, {}, {}}), absl::StatusCode::kUnimplemented,
       "unsupported GGUF version 1"},
      {"version 4", SerializeGguf({}, {}, {4, 32, {}, {}}), absl::StatusCode::kUnimplemented,
       "unsupported GGUF version 4"},
      {"overlap", SerializeGguf({}, two, overlap), absl::StatusCode::kInvalidArgument, "overlap"},
      {"past end", SerializeGguf({}, two, past_end), absl::StatusCode::kInvalidArgument,
       "runs past the end"},
      {"misaligned", SerializeGguf({}, two, misaligned), absl::StatusCode::kInvalidArgument,
       "alignment"},
      {"IQ2_XXS", SerializeGguf({}, two, iq2), absl::StatusCode::kUnimplemented,
       "tensor 'b' has unsupported ggml type id 16 (IQ2_XXS)"},
      {"Q4_K row of 32", SerializeGguf({}, two, q4k), absl::StatusCode::kInvalidArgument,
       "tensor 'b' (Q4_K): row length 32 is not a multiple of 256"},
      {"unknown type", SerializeGguf({}, two, unknown_type), absl::StatusCode::kUnimplemented,
       "type id 1000"},
      {"five dims", bad_dims, absl::StatusCode::kInvalidArgument, "5 dimensions"},
      {"duplicate key", SerializeGguf({{"k", GgufBool(true)}, {"k", GgufBool(false)}}, {}),
       absl::StatusCode::kInvalidArgument, "duplicate metadata key 'k'"},
      {"duplicate tensor", SerializeGguf({}, {two[0], two[0]}), absl::StatusCode::kInvalidArgument,
       "duplicate tensor 'a'"},
      {"alignment 3", SerializeGguf({{"general.alignment", GgufUint32(3)}}, {}),
       absl::StatusCode::kInvalidArgument, "general.alignment"},
      {"alignment string", SerializeGguf({{"general.alignment", GgufString("32")}}, {}),
       absl::StatusCode::kInvalidArgument, "general.alignment"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string p = Write(c.bytes, "bad.gguf");
    auto f = GgufFile::Open(p);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), c.code) << f.status();
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(p));
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.phrase));
  }
}

TEST_F(GgufTest, DeeplyNestedArraysAreRejected) {
  using namespace tandem::testing;  // NOLINT
  GgufValue v = GgufIntArray(GgufType::kInt32, {1});
  for (int i = 0; i < 20; ++i) v = GgufArrayOfArrays({v});
  auto f = GgufFile::Open(Write(SerializeGguf({{"deep", v}}, {})));
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("nested"));
}

TEST_F(GgufTest, QuantizedRowsMustBeWholeBlocks) {
  using namespace tandem::testing;  // NOLINT
  // A Q8_0 tensor of 64 elements, rewritten to claim 16 columns x 4 rows.
  TestTensor t = TestTensor::FromF32("q", {2, 32}, RandomValues(64, 1), DType::kQ8_0);
  std::string b = SerializeGguf({}, {t});
  const size_t pos = b.find(std::string("q", 1) + std::string("\x02\0\0\0", 4));
  ASSERT_NE(pos, std::string::npos);
  const uint64_t ne0 = 16, ne1 = 4;
  std::memcpy(&b[pos + 5], &ne0, 8);
  std::memcpy(&b[pos + 13], &ne1, 8);
  const std::string p = Write(b);
  auto f = GgufFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a multiple of 32"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(p));
}

TEST(GgmlTypes, IdsAndNames) {
  EXPECT_EQ(DTypeFromGgmlType(0), DType::kF32);
  EXPECT_EQ(DTypeFromGgmlType(1), DType::kF16);
  EXPECT_EQ(DTypeFromGgmlType(2), DType::kQ4_0);
  EXPECT_EQ(DTypeFromGgmlType(3), DType::kQ4_1);
  EXPECT_EQ(DTypeFromGgmlType(8), DType::kQ8_0);
  EXPECT_EQ(DTypeFromGgmlType(30), DType::kBF16);
  EXPECT_FALSE(DTypeFromGgmlType(12).has_value());
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kI32}) {
    EXPECT_EQ(DTypeFromGgmlType(GgmlTypeId(t)), t);
  }
  EXPECT_EQ(GgmlTypeName(14), "Q6_K");
  EXPECT_EQ(GgmlTypeName(5000), "type 5000");
}

}  // namespace
}  // namespace tandem
