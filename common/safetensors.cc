#include "common/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/status_macros.h"

namespace tandem {

using nlohmann::json;

absl::StatusOr<DType> DTypeFromSafetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I32") return DType::kI32;
  return absl::UnimplementedError(
      absl::StrCat("unsupported dtype '", std::string(name), "' (supported: F32, F16, BF16, I32)"));
}

std::string_view SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    default:
      return "";
  }
}

namespace {

absl::Status Bad(const std::string& path, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", msg));
}

// Reads a non-negative integer array entry (shape dims, offsets).
absl::StatusOr<uint64_t> NonNegative(const json& v, const std::string& path,
                                     const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= 0) return static_cast<uint64_t>(x);
    return Bad(path, absl::StrCat(what, " is negative (", x, ")"));
  }
  return Bad(path,
             absl::StrCat(what, " must be a non-negative integer, got ", json_util::TypeName(v)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = std::move(mapped);
  const uint64_t size = static_cast<uint64_t>(f->file_->size());
  if (size < 8) {
    return Bad(path, absl::StrCat("truncated file: ", size,
                                  " bytes is too short for the 8-byte header length"));
  }
  uint64_t header_len;
  std::memcpy(&header_len, f->file_->data(), 8);  // little-endian hosts only
  if (header_len > size - 8) {
    return Bad(path, absl::StrCat("header length ", header_len,
                                  " runs past the end of the file (file size ", size, ")"));
  }
  if (header_len > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                  kMaxHeaderBytes, " bytes"));
  }
  const char* hp = reinterpret_cast<const char*>(f->file_->data() + 8);
  const std::string_view htext(hp, static_cast<size_t>(header_len));
  json header = json::parse(htext.begin(), htext.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad(path, "the JSON header is not parseable");
  if (!header.is_object()) {
    return Bad(
        path, absl::StrCat("the JSON header must be an object, got ", json_util::TypeName(header)));
  }
  f->data_ = f->file_->data() + 8 + header_len;
  f->data_size_ = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return Bad(path, "__metadata__ must be an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(path, absl::StrCat("__metadata__ value of '", m.key(), "' is not a string"));
        }
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = absl::StrCat("tensor '", name, "'");
    if (!entry.is_object()) {
      return Bad(path,
                 absl::StrCat(what, ": entry must be an object, got ", json_util::TypeName(entry)));
    }
    SafetensorsTensor t;
    t.name = name;
    const json* dtype = json_util::Find(entry, "dtype");
    if (dtype == nullptr || !dtype->is_string()) {
      return Bad(path, absl::StrCat(what, ": missing or non-string 'dtype'"));
    }
    absl::StatusOr<DType> dt = DTypeFromSafetensors(dtype->get<std::string>());
    if (!dt.ok()) {
      return absl::Status(dt.status().code(),
                          absl::StrCat(path, ": ", what, ": ", dt.status().message()));
    }
    t.dtype = *dt;
    const json* shape = json_util::Find(entry, "shape");
    if (shape == nullptr || !shape->is_array()) {
      return Bad(path, absl::StrCat(what, ": missing or non-array 'shape'"));
    }
    uint64_t numel = 1;
    for (size_t d = 0; d < shape->size(); ++d) {
      TANDEM_ASSIGN_OR_RETURN(
          uint64_t v, NonNegative((*shape)[d], path, absl::StrCat(what, " shape[", d, "]")));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, v, &numel) || numel > (uint64_t{1} << 56)) {
        return Bad(path, absl::StrCat(what, ": absurd shape"));
      }
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const json* offs = json_util::Find(entry, "data_offsets");
    if (offs == nullptr || !offs->is_array() || offs->size() != 2) {
      return Bad(path, absl::StrCat(what, ": 'data_offsets' must be [begin, end]"));
    }
    TANDEM_ASSIGN_OR_RETURN(t.begin, NonNegative((*offs)[0], path, absl::StrCat(what, " begin")));
    TANDEM_ASSIGN_OR_RETURN(t.end, NonNegative((*offs)[1], path, absl::StrCat(what, " end")));
    if (t.begin > t.end || t.end > f->data_size_) {
      return Bad(path,
                 absl::StrCat(what, ": data_offsets [", t.begin, ", ", t.end,
                              "] out of range (data section holds ", f->data_size_, " bytes)"));
    }
    const uint64_t expected = numel * static_cast<uint64_t>(DTypeBlockBytes(t.dtype));
    if (t.end - t.begin != expected) {
      return Bad(path, absl::StrCat(what, ": data_offsets [", t.begin, ", ", t.end, "] span ",
                                    t.end - t.begin, " bytes but ", std::string(DTypeName(t.dtype)),
                                    " ", ShapeString(t.shape), " needs ", expected));
    }
    f->index_.emplace(name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }

  std::vector<size_t> order(f->tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return f->tensors_[a].begin < f->tensors_[b].begin; });
  const SafetensorsTensor* prev = nullptr;
  for (size_t i : order) {
    const SafetensorsTensor& t = f->tensors_[i];
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end) {
      return Bad(path, absl::StrCat("tensors '", prev->name, "' [", prev->begin, ", ", prev->end,
                                    ") and '", t.name, "' [", t.begin, ", ", t.end, ") overlap"));
    }
    prev = &t;
  }
  return f;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::View(const SafetensorsTensor& t) const {
  TensorView v;
  v.name = t.name;
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.data = data_ + t.begin;
  v.nbytes = static_cast<int64_t>(t.end - t.begin);
  return v;
}

}  // namespace tandem
