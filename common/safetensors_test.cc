#include "common/safetensors.h"

#include <cstring>

#include "common/testing/checkpoint_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using tandem::testing::RandomValues;
using tandem::testing::TestTensor;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tandem::testing::MakeTempDir("safetensors_test"); }
  void TearDown() override { tandem::testing::RemoveTree(dir_); }
  std::string Write(const std::string& bytes) {
    const std::string p = dir_ + "/t.safetensors";
    EXPECT_TRUE(tandem::testing::WriteFileBytes(p, bytes).ok());
    return p;
  }
  absl::Status OpenStatus(const std::string& header, const std::string& data) {
    path_ = Write(tandem::testing::SafetensorsFromParts(header, data));
    return SafetensorsFile::Open(path_).status();
  }
  std::string dir_;
  std::string path_;
};

TEST_F(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const std::vector<TestTensor> ts = {
      TestTensor::FromF32("a.weight", {3, 4}, RandomValues(12, 1), DType::kF32),
      TestTensor::FromF32("b", {5}, RandomValues(5, 2), DType::kF16),
      TestTensor::FromF32("c", {2, 2, 2}, RandomValues(8, 3), DType::kBF16),
      TestTensor::FromF32("d", {2}, {7, -9}, DType::kI32),
      TestTensor::FromF32("empty", {0, 4}, {}, DType::kF32),
      TestTensor::FromF32("scalar", {}, {3.5f}, DType::kF32),
  };
  const std::string p = Write(tandem::testing::SerializeSafetensors(ts, {{"format", "pt"}}));
  auto f = SafetensorsFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), p);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), ts.size());
  for (const TestTensor& t : ts) {
    const SafetensorsTensor* st = (*f)->Find(t.name);
    ASSERT_NE(st, nullptr) << t.name;
    const TensorView v = (*f)->View(*st);
    EXPECT_EQ(v.name, t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.nbytes, static_cast<int64_t>(t.bytes.size()));
    EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST_F(SafetensorsTest, OffsetsAreRelativeToTheDataSection) {
  // Hand-written header with tensors stored out of order and a gap.
  const float vals[4] = {1, 2, 3, 4};
  std::string data(24, '\0');
  std::memcpy(&data[8], vals, 16);
  std::string header = R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                       R"("y":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  while (header.size() % 8 != 0) header.push_back(' ');  // keeps the floats aligned
  ASSERT_TRUE(OpenStatus(header, data).ok());
  auto f = SafetensorsFile::Open(path_);
  ASSERT_TRUE(f.ok());
  const TensorView x = (*f)->View(*(*f)->Find("x"));
  EXPECT_EQ(x.as<float>()[3], 4.0f);
}

TEST_F(SafetensorsTest, DTypeNames) {
  EXPECT_EQ(*DTypeFromSafetensors("BF16"), DType::kBF16);
  EXPECT_EQ(*DTypeFromSafetensors("F16"), DType::kF16);
  EXPECT_EQ(*DTypeFromSafetensors("F32"), DType::kF32);
  for (const char* bad : {"F8_E4M3", "F8_E5M2", "F64", "I64", "U8", "BOOL", "bf16", ""}) {
    auto d = DTypeFromSafetensors(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("unsupported dtype"));
  }
  EXPECT_EQ(SafetensorsDTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(SafetensorsDTypeName(DType::kQ8_0), "");
}

TEST_F(SafetensorsTest, MalformedHeadersAreErrorsNamingTheFile) {
  struct Case {
    const char* what;
    std::string header;
    std::string data;
    const char* phrase;
  };
  const std::string d16(16, '\0');
  const std::vector<Case> cases = {
      {"not json", "{\"a\": ", d16, "not parseable"},
      {"array header", "[1, 2]", d16, "must be an object"},
      {"entry not object", R"({"a": 3})", d16, "entry must be an object"},
      {"no dtype", R"({"a":{"shape":[4],"data_offsets":[0,16]}})", d16, "dtype"},
      {"no shape", R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", d16, "shape"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", d16,
       "negative"},
      {"string dim", R"({"a":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}})", d16,
       "non-negative integer"},
      {"float dim", R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", d16,
       "non-negative integer"},
      {"huge dims",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", d16,
       "absurd shape"},
      {"one offset", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", d16,
       "data_offsets"},
      {"begin after end", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", d16,
       "out of range"},
      {"past end", R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", d16,
       "out of range"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", d16,
       "needs 12"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       d16, "overlap"},
      {"metadata not object", R"({"__metadata__": [1]})", d16, "__metadata__"},
      {"metadata value", R"({"__metadata__": {"k": 1}})", d16, "not a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const absl::Status s = OpenStatus(c.header, c.data);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path_));
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.phrase));
  }
}

TEST_F(SafetensorsTest, ShortFilesAndBadHeaderLengths) {
  auto check = [&](const std::string& bytes, const char* phrase) {
    const std::string p = Write(bytes);
    auto f = SafetensorsFile::Open(p);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(p));
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(phrase));
  };
  check("", "too short");
  check("\x05\0\0", "too short");
  std::string past(8, '\0');
  past[0] = 100;
  check(past + "{}", "runs past the end");
  std::string huge(8, '\xff');
  check(huge + "{}", "runs past the end");
}

TEST_F(SafetensorsTest, UnsupportedDTypeIsUnimplementedAndNamesTheTensor) {
  const absl::Status s =
      OpenStatus(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", "abcd");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path_));
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'w'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported dtype 'F8_E4M3'"));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(dir_ + "/nope.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
