#include "common/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "UINT8";
    case GgufType::kInt8:
      return "INT8";
    case GgufType::kUint16:
      return "UINT16";
    case GgufType::kInt16:
      return "INT16";
    case GgufType::kUint32:
      return "UINT32";
    case GgufType::kInt32:
      return "INT32";
    case GgufType::kFloat32:
      return "FLOAT32";
    case GgufType::kBool:
      return "BOOL";
    case GgufType::kString:
      return "STRING";
    case GgufType::kArray:
      return "ARRAY";
    case GgufType::kUint64:
      return "UINT64";
    case GgufType::kInt64:
      return "INT64";
    case GgufType::kFloat64:
      return "FLOAT64";
  }
  return "?";
}

std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 8:
      return DType::kQ8_0;
    case 26:
      return DType::kI32;
    case 30:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

uint32_t GgmlTypeId(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 8;
    case DType::kI32:
      return 26;
    case DType::kBF16:
      return 30;
  }
  return 0;
}

std::string GgmlTypeName(uint32_t id) {
  static constexpr const char* kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (id < std::size(kNames)) return kNames[id];
  return absl::StrCat("type ", id);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

size_t GgufValue::array_size() const {
  if (!is_array()) return 0;
  switch (elem_type) {
    case GgufType::kString:
      return strings.size();
    case GgufType::kArray:
      return items.size();
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return floats.size();
    default:
      return ints.size();
  }
}

namespace {

constexpr uint32_t kMaxGgufType = 12;
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Bounds-checked little-endian reader over the mapping.
class Reader {
 public:
  Reader(const uint8_t* data, int64_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  int64_t pos() const { return pos_; }
  int64_t remaining() const { return size_ - pos_; }

  absl::Status Error(const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", msg));
  }
  absl::Status Need(int64_t n, const std::string& what) const {
    if (n > remaining()) {
      return Error(absl::StrCat("truncated file: ", what, " needs ", n, " bytes at offset ", pos_,
                                " but only ", remaining(), " remain (file size ", size_, ")"));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(const std::string& what) {
    TANDEM_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string> String(const std::string& what) {
    TANDEM_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(absl::StrCat("length of ", what)));
    if (len > static_cast<uint64_t>(remaining())) {
      return Error(absl::StrCat("string length ", len, " of ", what, " at offset ", pos_ - 8,
                                " runs past the end of the file (", remaining(), " bytes remain)"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<int64_t>(len);
    return s;
  }
  const uint8_t* here() const { return data_ + pos_; }
  void Skip(int64_t n) { pos_ += n; }

 private:
  const uint8_t* data_;
  int64_t size_;
  const std::string& path_;
  int64_t pos_ = 0;
};

// Bytes one element of a type takes at least (exactly, for fixed-size types).
int64_t MinElemBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
      return 8;  // length prefix
    case GgufType::kArray:
      return 12;  // type + count
  }
  return 1;
}

bool IsFixedSize(GgufType t) { return t != GgufType::kString && t != GgufType::kArray; }

// Decodes one fixed-size scalar at `p` (integers and bools into *i, floats into *f).
void DecodeScalar(GgufType t, const uint8_t* p, int64_t* i, double* f) {
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case GgufType::kUint8:
      *i = load(uint8_t{});
      return;
    case GgufType::kInt8:
      *i = load(int8_t{});
      return;
    case GgufType::kBool:
      *i = load(uint8_t{}) != 0 ? 1 : 0;
      return;
    case GgufType::kUint16:
      *i = load(uint16_t{});
      return;
    case GgufType::kInt16:
      *i = load(int16_t{});
      return;
    case GgufType::kUint32:
      *i = load(uint32_t{});
      return;
    case GgufType::kInt32:
      *i = load(int32_t{});
      return;
    case GgufType::kUint64:
      *i = static_cast<int64_t>(load(uint64_t{}));
      return;
    case GgufType::kInt64:
      *i = load(int64_t{});
      return;
    case GgufType::kFloat32:
      *f = load(float{});
      return;
    case GgufType::kFloat64:
      *f = load(double{});
      return;
    default:
      return;
  }
}

absl::Status ReadValue(Reader& r, GgufType type, const std::string& key, int depth,
                       GgufValue* out) {
  out->type = type;
  if (IsFixedSize(type)) {
    const int64_t n = MinElemBytes(type);
    TANDEM_RETURN_IF_ERROR(r.Need(n, absl::StrCat("value of '", key, "'")));
    DecodeScalar(type, r.here(), &out->i, &out->f);
    r.Skip(n);
    return absl::OkStatus();
  }
  if (type == GgufType::kString) {
    TANDEM_ASSIGN_OR_RETURN(out->s, r.String(absl::StrCat("value of '", key, "'")));
    return absl::OkStatus();
  }
  // Array.
  if (depth >= kMaxArrayDepth) {
    return r.Error(
        absl::StrCat("metadata '", key, "': arrays nested deeper than ", kMaxArrayDepth));
  }
  TANDEM_ASSIGN_OR_RETURN(uint32_t et, r.Read<uint32_t>(absl::StrCat("array type of '", key, "'")));
  if (et > kMaxGgufType) {
    return r.Error(absl::StrCat("metadata '", key, "': unknown array element type ", et));
  }
  const auto elem = static_cast<GgufType>(et);
  out->elem_type = elem;
  TANDEM_ASSIGN_OR_RETURN(uint64_t count,
                          r.Read<uint64_t>(absl::StrCat("array length of '", key, "'")));
  const int64_t min_bytes = MinElemBytes(elem);
  if (count > static_cast<uint64_t>(r.remaining() / min_bytes)) {
    return r.Error(absl::StrCat("metadata '", key, "': array of ", count, " ",
                                std::string(GgufTypeName(elem)), " elements at offset ",
                                r.pos() - 12, " cannot fit in the ", r.remaining(),
                                " bytes that remain"));
  }
  const size_t n = static_cast<size_t>(count);
  if (IsFixedSize(elem)) {
    const bool is_float = elem == GgufType::kFloat32 || elem == GgufType::kFloat64;
    if (is_float) {
      out->floats.resize(n);
    } else {
      out->ints.resize(n);
    }
    for (size_t k = 0; k < n; ++k) {
      int64_t iv = 0;
      double fv = 0;
      DecodeScalar(elem, r.here(), &iv, &fv);
      r.Skip(min_bytes);
      if (is_float) {
        out->floats[k] = fv;
      } else {
        out->ints[k] = iv;
      }
    }
    return absl::OkStatus();
  }
  if (elem == GgufType::kString) {
    out->strings.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      TANDEM_ASSIGN_OR_RETURN(std::string s, r.String(absl::StrCat("'", key, "'[", k, "]")));
      out->strings.push_back(std::move(s));
    }
    return absl::OkStatus();
  }
  out->items.resize(n);
  for (size_t k = 0; k < n; ++k) {
    TANDEM_RETURN_IF_ERROR(
        ReadValue(r, GgufType::kArray, absl::StrCat(key, "[", k, "]"), depth + 1, &out->items[k]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->file_ = std::move(mapped);
  const int64_t size = f->file_->size();
  Reader r(f->file_->data(), size, path);

  if (size < 4 || std::memcmp(f->file_->data(), "GGUF", 4) != 0) {
    return r.Error("not a GGUF file (bad magic: the file does not start with \"GGUF\")");
  }
  r.Skip(4);
  TANDEM_ASSIGN_OR_RETURN(f->version_, r.Read<uint32_t>("version"));
  if (f->version_ != 2 && f->version_ != 3) {
    std::string hint;
    if ((f->version_ & 0xffffu) == 0 && f->version_ != 0) hint = " (a big-endian file?)";
    return absl::UnimplementedError(
        absl::StrCat(path, ": unsupported GGUF version ", f->version_, hint, "; supported: 2, 3"));
  }
  TANDEM_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor count"));
  TANDEM_ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata count"));
  // Each kv takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor
  // info 8 + 4 + 8 + 4 + 8: counts that cannot fit are corrupt.
  if (n_kv > static_cast<uint64_t>(r.remaining() / 13)) {
    return r.Error(absl::StrCat("truncated or corrupt file: metadata count ", n_kv,
                                " cannot fit in the ", r.remaining(), " bytes that remain"));
  }
  if (n_tensors > static_cast<uint64_t>(r.remaining() / 32)) {
    return r.Error(absl::StrCat("truncated or corrupt file: tensor count ", n_tensors,
                                " cannot fit in the ", r.remaining(), " bytes that remain"));
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    TANDEM_ASSIGN_OR_RETURN(std::string key, r.String(absl::StrCat("metadata key #", k)));
    TANDEM_ASSIGN_OR_RETURN(uint32_t t, r.Read<uint32_t>(absl::StrCat("type of '", key, "'")));
    if (t > kMaxGgufType) {
      return r.Error(absl::StrCat("metadata '", key, "' has unknown value type ", t));
    }
    GgufValue v;
    TANDEM_RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(t), key, 0, &v));
    if (!f->kv_.emplace(key, std::move(v)).second) {
      return r.Error(absl::StrCat("duplicate metadata key '", key, "'"));
    }
  }

  if (const GgufValue* a = f->Find("general.alignment"); a != nullptr) {
    if (!a->is_integer() || a->type == GgufType::kBool || a->i <= 0 || a->i > (int64_t{1} << 30) ||
        (a->i & (a->i - 1)) != 0) {
      return r.Error("general.alignment must be a power of two between 1 and 2^30");
    }
    f->alignment_ = static_cast<uint32_t>(a->i);
  }

  f->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo info;
    TANDEM_ASSIGN_OR_RETURN(info.name, r.String(absl::StrCat("name of tensor #", k)));
    const std::string tname = absl::StrCat("tensor '", info.name, "'");
    TANDEM_ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>(absl::StrCat("rank of ", tname)));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.Error(
          absl::StrCat(tname, " has ", n_dims, " dimensions (1 to ", kMaxDims, " allowed)"));
    }
    std::vector<int64_t> ne(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TANDEM_ASSIGN_OR_RETURN(uint64_t v, r.Read<uint64_t>(absl::StrCat("shape of ", tname)));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(v), &numel)) {
        return r.Error(absl::StrCat(tname, " has an absurd dimension ", v));
      }
      ne[d] = static_cast<int64_t>(v);
    }
    info.shape.assign(ne.rbegin(), ne.rend());
    TANDEM_ASSIGN_OR_RETURN(uint32_t ggml_type, r.Read<uint32_t>(absl::StrCat("type of ", tname)));
    const std::optional<DType> dt = DTypeFromGgmlType(ggml_type);
    info.converted = ConvertedQuantFromGgmlType(ggml_type);
    if (!dt && !info.converted) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": ", tname, " has unsupported ggml type id ", ggml_type, " (",
          GgmlTypeName(ggml_type),
          "); supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, and (converted at load) Q2_K, Q3_K, "
          "Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, IQ4_NL"));
    }
    info.dtype = dt ? *dt : ConvertedQuantComputeType(*info.converted);
    const int64_t block =
        info.converted ? ConvertedQuantBlockElems(*info.converted) : DTypeBlockElems(info.dtype);
    if ((info.converted || DTypeIsQuantized(info.dtype)) && ne[0] % block != 0) {
      return r.Error(absl::StrCat(tname, " (", GgmlTypeName(ggml_type), "): row length ", ne[0],
                                  " is not a multiple of ", block));
    }
    if (numel > std::numeric_limits<int64_t>::max() / 64) {
      return r.Error(absl::StrCat(tname, " has an absurd element count ", numel));
    }
    if (info.converted) {
      info.nbytes = numel / ConvertedQuantBlockElems(*info.converted) *
                    ConvertedQuantBlockBytes(*info.converted);
    } else {
      TANDEM_ASSIGN_OR_RETURN(info.nbytes, DTypeBytes(info.dtype, numel));
    }
    TANDEM_ASSIGN_OR_RETURN(info.offset, r.Read<uint64_t>(absl::StrCat("offset of ", tname)));
    if (info.offset % f->alignment_ != 0) {
      return r.Error(absl::StrCat(tname, " has offset ", info.offset,
                                  " that is not a multiple of the alignment ", f->alignment_));
    }
    if (!f->tensor_index_.emplace(info.name, f->tensors_.size()).second) {
      return r.Error(absl::StrCat("duplicate ", tname));
    }
    f->tensors_.push_back(std::move(info));
  }

  // Data section: after the tensor infos, padded to the alignment.
  const uint64_t a = f->alignment_;
  const uint64_t data_start = (static_cast<uint64_t>(r.pos()) + a - 1) / a * a;
  const uint64_t fsize = static_cast<uint64_t>(size);
  const uint64_t data_size = data_start <= fsize ? fsize - data_start : 0;
  f->data_offset_ = data_start;
  f->data_ = data_start <= fsize ? f->file_->data() + data_start : nullptr;

  std::vector<size_t> order(f->tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (const GgufTensorInfo& t : f->tensors_) {
    const uint64_t n = static_cast<uint64_t>(t.nbytes);
    if (n > 0 && (data_start > fsize || t.offset > data_size || n > data_size - t.offset)) {
      return r.Error(absl::StrCat("tensor '", t.name, "' (", n, " bytes at data offset ", t.offset,
                                  ") runs past the end of the file (data section holds ", data_size,
                                  " bytes)"));
    }
  }
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return f->tensors_[x].offset < f->tensors_[y].offset; });
  const GgufTensorInfo* prev = nullptr;
  for (size_t idx : order) {
    const GgufTensorInfo& t = f->tensors_[idx];
    if (t.nbytes == 0) continue;
    if (prev != nullptr && t.offset < prev->offset + static_cast<uint64_t>(prev->nbytes)) {
      return r.Error(absl::StrCat("tensors '", prev->name, "' and '", t.name,
                                  "' overlap (data offsets ", prev->offset, "+", prev->nbytes,
                                  " and ", t.offset, ")"));
    }
    prev = &t;
  }
  return f;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path(), ": metadata key '", std::string(key), "' not found"));
  }
  if (v->is_integer()) return v->i;
  if (v->is_float() && std::isfinite(v->f) && v->f == std::floor(v->f) && std::fabs(v->f) < 9e18) {
    return static_cast<int64_t>(v->f);
  }
  return absl::InvalidArgumentError(absl::StrCat(path(), ": metadata key '", std::string(key),
                                                 "' has type ", std::string(GgufTypeName(v->type)),
                                                 ", expected an integer"));
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path(), ": metadata key '", std::string(key), "' not found"));
  }
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return absl::InvalidArgumentError(absl::StrCat(path(), ": metadata key '", std::string(key),
                                                 "' has type ", std::string(GgufTypeName(v->type)),
                                                 ", expected a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path(), ": metadata key '", std::string(key), "' not found"));
  }
  if (v->type == GgufType::kString) return v->s;
  return absl::InvalidArgumentError(absl::StrCat(path(), ": metadata key '", std::string(key),
                                                 "' has type ", std::string(GgufTypeName(v->type)),
                                                 ", expected a string"));
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView GgufFile::View(const GgufTensorInfo& info) const {
  TensorView v;
  v.name = info.name;
  v.dtype = info.dtype;
  v.shape = info.shape;
  if (info.converted) {
    // A whole number of blocks (checked at open), so DTypeBytes cannot fail.
    v.nbytes = DTypeBytes(info.dtype, v.numel()).value_or(0);
    return v;
  }
  v.nbytes = info.nbytes;
  v.data = StoredData(info);
  return v;
}

const uint8_t* GgufFile::StoredData(const GgufTensorInfo& info) const {
  return (data_ == nullptr || info.nbytes == 0) ? data_ : data_ + info.offset;
}

}  // namespace tandem
