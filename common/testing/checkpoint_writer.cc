#include "common/testing/checkpoint_writer.h"

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/quant.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace tandem::testing {

using nlohmann::json;

int64_t TestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TestTensor TestTensor::FromF32(std::string name, std::vector<int64_t> shape,
                               const std::vector<float>& values, DType dtype) {
  TestTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  absl::StatusOr<int64_t> nbytes = DTypeBytes(dtype, t.numel());
  TANDEM_CHECK(nbytes.ok());
  t.bytes.assign(static_cast<size_t>(*nbytes), '\0');
  if (dtype == DType::kI32) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int32_t v = static_cast<int32_t>(values[i]);
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    }
  } else if (!values.empty()) {
    QuantizeFromF32(dtype, values.data(), t.numel(), t.bytes.data());
  }
  return t;
}

std::vector<float> TestTensor::ToF32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) ConvertToF32(dtype, bytes.data(), numel(), out.data());
  return out;
}

std::vector<float> RandomValues(int64_t n, uint32_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(seed) * 0xbf58476d1ce4e5b9ull);
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f) * scale;
  }
  return v;
}

absl::Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot create"));
  const size_t n = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fclose(f) == 0;
  if (!ok) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/", prefix, "_XXXXXX");
  char* p = ::mkdtemp(tmpl.data());
  TANDEM_CHECK(p != nullptr);
  return tmpl;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// ---- safetensors ----

std::string SafetensorsFromParts(const std::string& header_json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header_json.size();
  std::memcpy(out.data(), &n, 8);
  out += header_json;
  out += data;
  return out;
}

std::string SerializeSafetensors(const std::vector<TestTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::string data;
  for (const TestTensor& t : tensors) {
    const std::string_view dt = SafetensorsDTypeName(t.dtype);
    TANDEM_CHECK(!dt.empty());
    json e = json::object();
    e["dtype"] = std::string(dt);
    e["shape"] = t.shape;
    e["data_offsets"] = {data.size(), data.size() + t.bytes.size()};
    header[t.name] = e;
    data += t.bytes;
  }
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return SafetensorsFromParts(text, data);
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TestTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  return WriteFileBytes(path, SerializeSafetensors(tensors, metadata));
}

absl::Status WriteHfDirectory(const std::string& dir, const json& config,
                              const std::vector<TestTensor>& tensors, const HfDirOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  auto dump = [](const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); };
  TANDEM_RETURN_IF_ERROR(WriteFileBytes(dir + "/config.json", dump(config)));
  if (options.generation_config) {
    TANDEM_RETURN_IF_ERROR(
        WriteFileBytes(dir + "/generation_config.json", dump(*options.generation_config)));
  }
  if (options.write_tokenizer_files) {
    TANDEM_RETURN_IF_ERROR(WriteFileBytes(
        dir + "/tokenizer.json",
        R"({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})"));
    TANDEM_RETURN_IF_ERROR(WriteFileBytes(dir + "/tokenizer_config.json", "{}"));
  }
  const int n = std::max(1, options.num_shards);
  if (n == 1) return WriteSafetensors(dir + "/model.safetensors", tensors);
  json weight_map = json::object();
  for (int s = 0; s < n; ++s) {
    const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, n);
    std::vector<TestTensor> part;
    for (size_t i = static_cast<size_t>(s); i < tensors.size(); i += static_cast<size_t>(n)) {
      part.push_back(tensors[i]);
      weight_map[tensors[i].name] = file;
    }
    TANDEM_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + file, part));
  }
  json index = json::object();
  index["metadata"] = json::object();
  index["weight_map"] = weight_map;
  return WriteFileBytes(dir + "/model.safetensors.index.json", dump(index));
}

// ---- GGUF ----

GgufValue GgufInt(GgufType type, int64_t v) {
  GgufValue g;
  g.type = type;
  g.i = v;
  return g;
}
GgufValue GgufUint32(uint32_t v) { return GgufInt(GgufType::kUint32, v); }
GgufValue GgufFloat(GgufType type, double v) {
  GgufValue g;
  g.type = type;
  g.f = v;
  return g;
}
GgufValue GgufFloat32(float v) { return GgufFloat(GgufType::kFloat32, v); }
GgufValue GgufBool(bool v) { return GgufInt(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufString(std::string v) {
  GgufValue g;
  g.type = GgufType::kString;
  g.s = std::move(v);
  return g;
}
GgufValue GgufIntArray(GgufType elem, std::vector<int64_t> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = elem;
  g.ints = std::move(v);
  return g;
}
GgufValue GgufFloatArray(GgufType elem, std::vector<double> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = elem;
  g.floats = std::move(v);
  return g;
}
GgufValue GgufStringArray(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = GgufType::kString;
  g.strings = std::move(v);
  return g;
}
GgufValue GgufArrayOfArrays(std::vector<GgufValue> items) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = GgufType::kArray;
  g.items = std::move(items);
  return g;
}

namespace {

template <typename T>
void Put(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

void PutScalar(std::string* out, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::kUint8:
      Put<uint8_t>(out, static_cast<uint8_t>(i));
      return;
    case GgufType::kInt8:
      Put<int8_t>(out, static_cast<int8_t>(i));
      return;
    case GgufType::kBool:
      Put<uint8_t>(out, i != 0 ? 1 : 0);
      return;
    case GgufType::kUint16:
      Put<uint16_t>(out, static_cast<uint16_t>(i));
      return;
    case GgufType::kInt16:
      Put<int16_t>(out, static_cast<int16_t>(i));
      return;
    case GgufType::kUint32:
      Put<uint32_t>(out, static_cast<uint32_t>(i));
      return;
    case GgufType::kInt32:
      Put<int32_t>(out, static_cast<int32_t>(i));
      return;
    case GgufType::kUint64:
      Put<uint64_t>(out, static_cast<uint64_t>(i));
      return;
    case GgufType::kInt64:
      Put<int64_t>(out, i);
      return;
    case GgufType::kFloat32:
      Put<float>(out, static_cast<float>(f));
      return;
    case GgufType::kFloat64:
      Put<double>(out, f);
      return;
    default:
      TANDEM_CHECK(false && "not a scalar type");
  }
}

void PutValue(std::string* out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kString:
      PutString(out, v.s);
      return;
    case GgufType::kArray: {
      Put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      Put<uint64_t>(out, v.array_size());
      switch (v.elem_type) {
        case GgufType::kString:
          for (const auto& s : v.strings) PutString(out, s);
          return;
        case GgufType::kArray:
          for (const auto& item : v.items) PutValue(out, item);
          return;
        case GgufType::kFloat32:
        case GgufType::kFloat64:
          for (double f : v.floats) PutScalar(out, v.elem_type, 0, f);
          return;
        default:
          for (int64_t i : v.ints) PutScalar(out, v.elem_type, i, 0);
          return;
      }
    }
    default:
      PutScalar(out, v.type, v.i, v.f);
  }
}

}  // namespace

std::string SerializeGguf(const GgufMetadata& metadata, const std::vector<TestTensor>& tensors,
                          const GgufWriteOptions& options) {
  GgufMetadata kv = metadata;
  bool has_alignment = false;
  for (const auto& [k, v] : kv) has_alignment |= k == "general.alignment";
  if (options.alignment != 32 && !has_alignment) {
    kv.emplace_back("general.alignment", GgufUint32(options.alignment));
  }
  const uint64_t align = options.alignment;
  std::string out = "GGUF";
  Put<uint32_t>(&out, options.version);
  Put<uint64_t>(&out, tensors.size());
  Put<uint64_t>(&out, kv.size());
  for (const auto& [k, v] : kv) {
    PutString(&out, k);
    Put<uint32_t>(&out, static_cast<uint32_t>(v.type));
    PutValue(&out, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TestTensor& t : tensors) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(&out, *it);
    auto type_it = options.type_overrides.find(t.name);
    Put<uint32_t>(&out,
                  type_it != options.type_overrides.end() ? type_it->second : GgmlTypeId(t.dtype));
    auto off_it = options.offset_overrides.find(t.name);
    Put<uint64_t>(&out, off_it != options.offset_overrides.end() ? off_it->second : offset);
    offsets.push_back(offset);
    offset = (offset + t.bytes.size() + align - 1) / align * align;
  }
  while (out.size() % align != 0) out.push_back('\0');
  const size_t data_start = out.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.resize(data_start + offsets[i], '\0');
    out += tensors[i].bytes;
  }
  return out;
}

absl::Status WriteGguf(const std::string& path, const GgufMetadata& metadata,
                       const std::vector<TestTensor>& tensors, const GgufWriteOptions& options) {
  return WriteFileBytes(path, SerializeGguf(metadata, tensors, options));
}

}  // namespace tandem::testing
