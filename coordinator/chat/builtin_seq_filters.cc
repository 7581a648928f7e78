// Jinja's builtin filters on sequences and mappings (jinja2 3.1 semantics).
// Like jinja2, map/select/reject/unique/items/batch/slice/reverse return
// one-shot iterators (always truthy, no len()); |list materializes them.
#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/py_text.h"
#include "coordinator/chat/str_cat.h"

namespace tandem::jinja {
namespace {

using Fn = absl::StatusOr<Value>;

Value Iterator(std::vector<Value> items) {
  return Value::List(std::move(items), ListKind::kIterator);
}

// Lower-cases strings, for the case-insensitive sort/unique/min/max.
Value IgnoreCase(const Value& v) {
  return v.is_string() ? Value::String(PyLower(v.str())) : v;
}

absl::StatusOr<std::string> StrArg(Interpreter& in, const BoundArgs& b,
                                   size_t i, std::string def) {
  if (!b.has(i)) return def;
  return in.Str(b.get(i));
}

Fn FFirst(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("first", a, {}));
  (void)b;
  if (v.is_string() && !v.str().empty()) {
    char32_t c;
    return Value::String(v.str().substr(0, DecodeUtf8At(v.str(), 0, &c)));
  }
  if (v.is_list() && !v.list().items.empty()) return v.list().items.front();
  if (v.is_dict() && !v.dict().items.empty())
    return v.dict().items.front().first;
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items,
                          in.Iterate(v));  // type check
  return Value::Undefined("No first item, sequence was empty.");
}

Fn FLast(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("last", a, {}));
  (void)b;
  if (v.is_iterator())
    return Interpreter::TypeError("'generator' object is not reversible");
  if (v.is_string() && !v.str().empty()) {
    const std::u32string u = DecodeUtf8(v.str());
    return Value::String(EncodeUtf8(u.substr(u.size() - 1)));
  }
  if (v.is_list() && !v.list().items.empty()) return v.list().items.back();
  if (v.is_dict() && !v.dict().items.empty())
    return v.dict().items.back().first;
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  return Value::Undefined("No last item, sequence was empty.");
}

Fn FList(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("list", a, {}));
  (void)b;
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  return Value::List(std::move(items));
}

Fn FItems(Interpreter&, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("items", a, {}));
  (void)b;
  if (v.is_undefined()) return Iterator({});
  if (!v.is_dict())
    return Interpreter::TypeError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items)
    out.push_back(Value::List({k, x}, ListKind::kTuple));
  return Iterator(std::move(out));
}

Fn FJoin(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("join", a, {"d", "attribute"}));
  TANDEM_ASSIGN_OR_RETURN(std::string sep, StrArg(in, b, 0, ""));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value x = items[i];
    if (b.has(1)) {
      TANDEM_ASSIGN_OR_RETURN(x, GetAttrPath(in, x, b.get(1)));
    }
    if (i) out += sep;
    TANDEM_RETURN_IF_ERROR(AppendStr(x, &out, in.limits().max_output_bytes));
    if (out.size() > in.limits().max_output_bytes)
      return in.ChargeBytes(out.size());
  }
  TANDEM_RETURN_IF_ERROR(in.ChargeBytes(out.size()));
  return Value::String(std::move(out));
}

Fn FReverse(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b, BoundArgs::Bind("reverse", a, {}));
  (void)b;
  if (v.is_string()) {
    std::u32string u = DecodeUtf8(v.str());
    std::reverse(u.begin(), u.end());
    return Value::String(EncodeUtf8(u));
  }
  auto items = in.Iterate(v);
  if (!items.ok())
    return absl::InvalidArgumentError(
        "FilterArgumentError: argument must be iterable");
  std::reverse(items->begin(), items->end());
  // reversed() of a sequence is an iterator; a generator becomes a list.
  return Value::List(std::move(*items),
                     v.is_iterator() ? ListKind::kList : ListKind::kIterator);
}

Fn FBatch(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("batch", a, {"linecount", "fill_with"}, 1));
  TANDEM_ASSIGN_OR_RETURN(int64_t n, ToIndex("batch", b.get(0)));
  if (n <= 0) return Interpreter::ValueError("batch size must be positive");
  if (n > in.limits().max_container_nodes) {
    return absl::InvalidArgumentError(Cat("value has more than the limit of ",
                                          in.limits().max_container_nodes,
                                          " elements"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += static_cast<size_t>(n)) {
    std::vector<Value> row(
        items.begin() + static_cast<std::ptrdiff_t>(i),
        items.begin() + static_cast<std::ptrdiff_t>(std::min(
                            items.size(), i + static_cast<size_t>(n))));
    if (b.has(1) && !b.get(1).is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(b.get(1));
    }
    out.push_back(Value::List(std::move(row)));
  }
  return Iterator(std::move(out));
}

Fn FSlice(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b, BoundArgs::Bind("slice", a, {"slices", "fill_with"}, 1));
  TANDEM_ASSIGN_OR_RETURN(int64_t slices, ToIndex("slice", b.get(0)));
  if (slices <= 0 || slices > 100000)
    return Interpreter::ValueError("bad slice count");
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> seq, in.Iterate(v));
  const auto len = static_cast<int64_t>(seq.size());
  const int64_t per = len / slices, extra = len % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (b.has(1) && !b.get(1).is_none() && k >= extra) tmp.push_back(b.get(1));
    out.push_back(Value::List(std::move(tmp)));
  }
  return Iterator(std::move(out));
}

Fn FDictsort(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind("dictsort", a, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return Interpreter::TypeError("dictsort expects a mapping");
  const bool cs = b.has(0) && Truthy(b.get(0));
  const std::string by =
      b.has(1) && b.get(1).is_string() ? b.get(1).str() : "key";
  if (by != "key" && by != "value") {
    return absl::InvalidArgumentError(
        "FilterArgumentError: You can only sort by either \"key\" or "
        "\"value\"");
  }
  const bool reverse = b.has(2) && Truthy(b.get(2));
  std::vector<std::pair<Value, Value>> items = v.dict().items;
  absl::Status err;
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(items.size() * 8)));
  std::stable_sort(items.begin(), items.end(),
                   [&](const auto& x, const auto& y) {
                     Value kx = by == "key" ? x.first : x.second,
                           ky = by == "key" ? y.first : y.second;
                     if (!cs) kx = IgnoreCase(kx), ky = IgnoreCase(ky);
                     auto c = reverse ? Compare(ky, kx) : Compare(kx, ky);
                     if (!c.ok() && err.ok()) err = c.status();
                     return c.ok() && *c < 0;
                   });
  TANDEM_RETURN_IF_ERROR(err);
  std::vector<Value> out;
  for (auto& [k, x] : items)
    out.push_back(Value::List({k, x}, ListKind::kTuple));
  return Value::List(std::move(out));
}

// Sort keys for sort/min/max/unique: attribute path(s), optionally lower-cased.
absl::StatusOr<Value> SortKey(Interpreter& in, const Value& item,
                              const BoundArgs& b, size_t attr_i,
                              bool case_sensitive, bool multi) {
  if (!b.has(attr_i) || b.get(attr_i).is_none())
    return case_sensitive ? item : IgnoreCase(item);
  const Value& attr = b.get(attr_i);
  if (!multi || !attr.is_string()) {
    TANDEM_ASSIGN_OR_RETURN(Value k, GetAttrPath(in, item, attr));
    return case_sensitive ? k : IgnoreCase(k);
  }
  std::vector<Value> keys;
  for (absl::string_view piece : absl::StrSplit(attr.str(), ',')) {
    const std::string_view part(piece.data(), piece.size());
    TANDEM_ASSIGN_OR_RETURN(
        Value k, GetAttrPath(in, item, Value::String(std::string(part))));
    keys.push_back(case_sensitive ? k : IgnoreCase(k));
  }
  return Value::List(std::move(keys));
}

Fn FSort(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind("sort", a, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = b.has(0) && Truthy(b.get(0));
  const bool cs = b.has(1) && Truthy(b.get(1));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items) {
    TANDEM_ASSIGN_OR_RETURN(Value k, SortKey(in, x, b, 2, cs, true));
    keyed.emplace_back(std::move(k), std::move(x));
  }
  TANDEM_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(keyed.size() * 8)));
  absl::Status err;
  std::stable_sort(
      keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        if (x.first.is_undefined() || y.first.is_undefined()) {
          if (err.ok())
            err = Interpreter::UndefinedError(x.first.is_undefined() ? x.first
                                                                     : y.first);
          return false;
        }
        auto c =
            reverse ? Compare(y.first, x.first) : Compare(x.first, y.first);
        if (!c.ok() && err.ok()) err = c.status();
        return c.ok() && *c < 0;
      });
  TANDEM_RETURN_IF_ERROR(err);
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

Fn FUnique(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind("unique", a, {"case_sensitive", "attribute"}));
  const bool cs = b.has(0) && Truthy(b.get(0));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> seen, out;
  for (Value& x : items) {
    TANDEM_ASSIGN_OR_RETURN(Value k, SortKey(in, x, b, 1, cs, false));
    if ((k.is_list() && !k.is_tuple()) || k.is_dict()) {
      return Interpreter::TypeError(
          Cat("unhashable type: '", TypeName(k), "'"));
    }
    TANDEM_RETURN_IF_ERROR(
        in.Charge(static_cast<int64_t>(seen.size() / 4 + 1)));
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return Equals(s, k); })) {
      seen.push_back(std::move(k));
      out.push_back(std::move(x));
    }
  }
  return Iterator(std::move(out));
}

absl::StatusOr<Value> MinMax(Interpreter& in, const Value& v, CallArgs& a,
                             bool max) {
  TANDEM_ASSIGN_OR_RETURN(
      BoundArgs b,
      BoundArgs::Bind(max ? "max" : "min", a, {"case_sensitive", "attribute"}));
  const bool cs = b.has(0) && Truthy(b.get(0));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty())
    return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  TANDEM_ASSIGN_OR_RETURN(Value best_key,
                          SortKey(in, items[0], b, 1, cs, false));
  for (size_t i = 1; i < items.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(Value k, SortKey(in, items[i], b, 1, cs, false));
    TANDEM_ASSIGN_OR_RETURN(int c, Compare(k, best_key));
    if (max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Fn FMax(Interpreter& in, const Value& v, CallArgs& a) {
  return MinMax(in, v, a, true);
}
Fn FMin(Interpreter& in, const Value& v, CallArgs& a) {
  return MinMax(in, v, a, false);
}

Fn FSum(Interpreter& in, const Value& v, CallArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(BoundArgs b,
                          BoundArgs::Bind("sum", a, {"attribute", "start"}));
  Value total = b.get_or(1, Value::Int(0));
  if (total.is_string())
    return Interpreter::TypeError(
        "sum() can't sum strings [use ''.join(seq) instead]");
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  for (Value& x : items) {
    if (b.has(0)) {
      TANDEM_ASSIGN_OR_RETURN(x, GetAttrPath(in, x, b.get(0)));
    }
    // Reuse the + operator through a tiny template-free path.
    if (total.is_integral() && x.is_integral()) {
      int64_t r;
      if (__builtin_add_overflow(total.int_value(), x.int_value(), &r)) {
        return absl::InvalidArgumentError(
            "OverflowError: integer result does not fit in 64 bits");
      }
      total = Value::Int(r);
    } else if (total.is_number() && x.is_number()) {
      total = Value::Float(total.float_value() + x.float_value());
    } else if (total.is_list() && x.is_list() &&
               total.list().kind == x.list().kind) {
      std::vector<Value> items2 = total.list().items;
      items2.insert(items2.end(), x.list().items.begin(), x.list().items.end());
      total = Value::List(std::move(items2), total.list().kind);
      TANDEM_RETURN_IF_ERROR(in.CheckValue(total));
    } else {
      if (x.is_undefined()) return Interpreter::UndefinedError(x);
      return Interpreter::TypeError(Cat("unsupported operand type(s) for +: '",
                                        TypeName(total), "' and '", TypeName(x),
                                        "'"));
    }
  }
  return total;
}

Fn FMap(Interpreter& in, const Value& v, CallArgs& a) {
  if (!Truthy(v)) return Iterator({});
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out;
  if (a.args.empty() &&
      std::any_of(a.kwargs.begin(), a.kwargs.end(),
                  [](const auto& kv) { return kv.first == "attribute"; })) {
    TANDEM_ASSIGN_OR_RETURN(
        BoundArgs b, BoundArgs::Bind("map", a, {"attribute", "default"}));
    for (const Value& x : items) {
      TANDEM_ASSIGN_OR_RETURN(Value r, GetAttrPath(in, x, b.get(0)));
      if (r.is_undefined() && b.has(1) && !b.get(1).is_none()) r = b.get(1);
      out.push_back(std::move(r));
    }
    return Iterator(std::move(out));
  }
  if (a.args.empty())
    return absl::InvalidArgumentError(
        "FilterArgumentError: map requires a filter argument");
  TANDEM_ASSIGN_OR_RETURN(std::string name, in.Str(a.args[0]));
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& x : items) {
    TANDEM_ASSIGN_OR_RETURN(Value r, in.CallFilter(name, x, rest));
    out.push_back(std::move(r));
  }
  return Iterator(std::move(out));
}

absl::StatusOr<Value> SelectOrReject(Interpreter& in, const Value& v,
                                     CallArgs& a, bool select, bool attr) {
  if (!Truthy(v)) return Iterator({});
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  size_t off = 0;
  Value attribute;
  if (attr) {
    if (a.args.empty()) {
      return absl::InvalidArgumentError(
          "FilterArgumentError: Missing parameter for attribute name");
    }
    attribute = a.args[0];
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs rest;
  if (a.args.size() > off) {
    TANDEM_ASSIGN_OR_RETURN(std::string t, in.Str(a.args[off]));
    test = std::move(t);
    rest.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(off + 1),
                     a.args.end());
    rest.kwargs = a.kwargs;
  }
  std::vector<Value> out;
  for (Value& x : items) {
    Value subject = x;
    if (attr) {
      TANDEM_ASSIGN_OR_RETURN(subject, GetAttrPath(in, x, attribute));
    }
    bool ok;
    if (test) {
      TANDEM_ASSIGN_OR_RETURN(ok, in.CallTest(*test, subject, rest));
    } else {
      ok = Truthy(subject);
    }
    if (ok == select) out.push_back(std::move(x));
  }
  return Iterator(std::move(out));
}
Fn FSelect(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectOrReject(in, v, a, true, false);
}
Fn FReject(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectOrReject(in, v, a, false, false);
}
Fn FSelectAttr(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectOrReject(in, v, a, true, true);
}
Fn FRejectAttr(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectOrReject(in, v, a, false, true);
}

}  // namespace

namespace internal {

FilterFn FindSequenceFilter(std::string_view name) {
  static const auto* const kFilters =
      new absl::flat_hash_map<std::string_view, FilterFn>{
          {"batch", FBatch},
          {"dictsort", FDictsort},
          {"first", FFirst},
          {"items", FItems},
          {"join", FJoin},
          {"last", FLast},
          {"list", FList},
          {"map", FMap},
          {"max", FMax},
          {"min", FMin},
          {"reject", FReject},
          {"rejectattr", FRejectAttr},
          {"reverse", FReverse},
          {"select", FSelect},
          {"selectattr", FSelectAttr},
          {"slice", FSlice},
          {"sort", FSort},
          {"sum", FSum},
          {"unique", FUnique},
      };
  auto it = kFilters->find(name);
  return it == kFilters->end() ? nullptr : it->second;
}

}  // namespace internal
}  // namespace tandem::jinja
