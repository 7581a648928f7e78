#include "coordinator/structured/byte_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::structured {
namespace {

// The pattern, parsed.
struct Node {
  enum class Kind { kEmpty, kBytes, kSet, kConcat, kAlt, kRepeat } kind = Kind::kEmpty;
  std::string bytes;           // kBytes
  std::bitset<128> ascii;      // kSet
  bool non_ascii = false;      // kSet: and any non-ASCII character
  std::vector<Node> children;  // kConcat, kAlt, kRepeat (one)
  int min = 0, max = -1;       // kRepeat; max -1: no bound
};

constexpr int kMaxRepeat = 256;

absl::Status Bad(std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("'pattern': ", std::string(why)));
}

Node Set(std::bitset<128> ascii, bool non_ascii) {
  Node n;
  n.kind = Node::Kind::kSet;
  n.ascii = ascii;
  n.non_ascii = non_ascii;
  return n;
}

std::bitset<128> Range(int lo, int hi) {
  std::bitset<128> s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

std::bitset<128> Digits() { return Range('0', '9'); }
std::bitset<128> Word() { return Range('a', 'z') | Range('A', 'Z') | Digits() | Range('_', '_'); }
std::bitset<128> Spaces() {
  std::bitset<128> s;
  for (char c : {' ', '\t', '\n', '\r', '\f', '\v'}) s.set(static_cast<size_t>(c));
  return s;
}

// UTF-8 bytes of a code point.
std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  // The whole pattern: top-level alternatives, each with its anchors
  // turned into "anything before / after" where they are missing.
  absl::StatusOr<Node> Pattern() {
    Node top;
    top.kind = Node::Kind::kAlt;
    while (true) {
      const bool start = Eat('^');
      auto body = Concat();
      if (!body.ok()) return body.status();
      const bool end = Eat('$');
      Node alt;
      alt.kind = Node::Kind::kConcat;
      if (!start) alt.children.push_back(AnyString());
      alt.children.push_back(*std::move(body));
      if (!end) alt.children.push_back(AnyString());
      top.children.push_back(std::move(alt));
      if (i_ == p_.size()) break;
      if (!Eat('|')) return Bad(absl::StrCat("unexpected '", std::string(1, p_[i_]), "'"));
    }
    return top;
  }

 private:
  static Node AnyString() {
    Node any = Set(~std::bitset<128>(), true);
    Node n;
    n.kind = Node::Kind::kRepeat;
    n.children.push_back(std::move(any));
    return n;
  }

  bool Eat(char c) {
    if (i_ < p_.size() && p_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  absl::StatusOr<Node> Alt() {
    Node n;
    n.kind = Node::Kind::kAlt;
    do {
      auto c = Concat();
      if (!c.ok()) return c.status();
      n.children.push_back(*std::move(c));
    } while (Eat('|'));
    return n;
  }

  absl::StatusOr<Node> Concat() {
    Node n;
    n.kind = Node::Kind::kConcat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) break;  // an end anchor
      auto a = Repeat();
      if (!a.ok()) return a.status();
      n.children.push_back(*std::move(a));
    }
    return n;
  }

  absl::StatusOr<int> Number() {
    int v = 0, digits = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = std::min(v * 10 + (p_[i_++] - '0'), 1000000);
      ++digits;
    }
    if (digits == 0) return Bad("a count in {} is not a number");
    return v;
  }

  absl::StatusOr<Node> Repeat() {
    auto atom = Atom();
    if (!atom.ok()) return atom.status();
    Node n = *std::move(atom);
    while (i_ < p_.size()) {
      int min, max;
      const char c = p_[i_];
      if (c == '*') {
        min = 0, max = -1;
        ++i_;
      } else if (c == '+') {
        min = 1, max = -1;
        ++i_;
      } else if (c == '?') {
        min = 0, max = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        auto lo = Number();
        if (!lo.ok()) return lo.status();
        min = max = *lo;
        if (Eat(',')) {
          max = -1;
          if (i_ < p_.size() && p_[i_] != '}') {
            auto hi = Number();
            if (!hi.ok()) return hi.status();
            max = *hi;
          }
        }
        if (!Eat('}')) return Bad("an unclosed {}");
        if (max >= 0 && max < min) return Bad("a count {n,m} with m < n");
        if (min > kMaxRepeat || max > kMaxRepeat) {
          return Bad(absl::StrCat("counts above ", kMaxRepeat, " are not supported"));
        }
      } else {
        break;
      }
      Eat('?');  // lazy: the same strings
      Node r;
      r.kind = Node::Kind::kRepeat;
      r.min = min;
      r.max = max;
      r.children.push_back(std::move(n));
      n = std::move(r);
    }
    return n;
  }

  // An escape's class (\d \w \s and complements), or its character.
  absl::StatusOr<Node> Escape(bool in_class) {
    if (i_ >= p_.size()) return Bad("a trailing '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return Set(Digits(), false);
      case 'D':
        return Set(~Digits(), true);
      case 'w':
        return Set(Word(), false);
      case 'W':
        return Set(~Word(), true);
      case 's':
        return Set(Spaces(), false);
      case 'S':
        return Set(~Spaces(), true);
      case 'n':
        return Literal("\n");
      case 't':
        return Literal("\t");
      case 'r':
        return Literal("\r");
      case 'f':
        return Literal("\f");
      case 'v':
        return Literal("\v");
      case '0':
        return Literal(std::string(1, '\0'));
      case 'u':
      case 'x': {
        const size_t len = c == 'u' ? 4 : 2;
        if (i_ + len > p_.size()) return Bad("a short \\u or \\x escape");
        uint32_t cp = 0;
        for (size_t k = 0; k < len; ++k) {
          const char h = p_[i_++];
          const int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (v < 0) return Bad("a bad hex digit in an escape");
          cp = cp * 16 + static_cast<uint32_t>(v);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return Bad("surrogate escapes are not supported");
        if (in_class && cp >= 0x80) return Bad("non-ASCII characters in a class are not supported");
        return Literal(Utf8(cp));
      }
      case 'b':
      case 'B':
        return Bad("word boundaries (\\b, \\B) are not supported");
      default:
        if (c >= '1' && c <= '9') return Bad("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          return Bad(absl::StrCat("the escape \\", std::string(1, c), " is not supported"));
        }
        return Literal(std::string(1, c));  // \. \- \/ \\ ...
    }
  }

  static Node Literal(std::string bytes) {
    Node n;
    n.kind = Node::Kind::kBytes;
    n.bytes = std::move(bytes);
    return n;
  }

  absl::StatusOr<Node> Class() {
    const bool negated = Eat('^');
    std::bitset<128> set;
    bool non_ascii = false;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      int lo;
      if (p_[i_] == '\\') {
        ++i_;
        auto e = Escape(/*in_class=*/true);
        if (!e.ok()) return e.status();
        if (e->kind == Node::Kind::kSet) {
          set |= e->ascii;
          non_ascii = non_ascii || e->non_ascii;
          continue;
        }
        lo = static_cast<uint8_t>(e->bytes[0]);
      } else {
        lo = static_cast<uint8_t>(p_[i_++]);
      }
      if (lo >= 0x80) return Bad("non-ASCII characters in a class are not supported");
      int hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (p_[i_] == '\\') {
          ++i_;
          auto e = Escape(true);
          if (!e.ok()) return e.status();
          if (e->kind != Node::Kind::kBytes) return Bad("a class range ends in a class");
          hi = static_cast<uint8_t>(e->bytes[0]);
        } else {
          hi = static_cast<uint8_t>(p_[i_++]);
        }
        if (hi >= 0x80) return Bad("non-ASCII characters in a class are not supported");
        if (hi < lo) return Bad("a class range out of order");
      }
      set |= Range(lo, hi);
    }
    if (!Eat(']')) return Bad("an unclosed '['");
    return negated ? Set(~set, !non_ascii) : Set(set, non_ascii);
  }

  absl::StatusOr<Node> Atom() {
    const char c = p_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (Eat('?')) {
          if (!Eat(':')) return Bad("lookaround and named groups are not supported");
        }
        auto inner = Alt();
        if (!inner.ok()) return inner.status();
        if (!Eat(')')) return Bad("an unclosed '('");
        return inner;
      }
      case '[':
        ++i_;
        return Class();
      case '.': {
        ++i_;
        std::bitset<128> all = ~std::bitset<128>();
        all.reset('\n');
        all.reset('\r');
        return Set(all, true);
      }
      case '\\':
        ++i_;
        return Escape(/*in_class=*/false);
      case '^':
      case '$':
        return Bad("anchors are supported only at the ends of the pattern's alternatives");
      case '*':
      case '+':
      case '?':
      case '{':
        return Bad(absl::StrCat("'", std::string(1, c), "' repeats nothing"));
      case ')':
        return Bad("an unopened ')'");
      default: {
        // One character, all its UTF-8 bytes.
        const uint8_t lead = static_cast<uint8_t>(c);
        const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        std::string bytes(p_.substr(i_, len));
        i_ += len;
        return Literal(std::move(bytes));
      }
    }
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Thompson's construction: states with epsilon moves and byte-range moves.
struct Nfa {
  struct State {
    std::vector<int> eps;
    std::vector<std::pair<std::pair<uint8_t, uint8_t>, int>> moves;  // [lo, hi] -> state
  };
  std::vector<State> states;

  int Add() {
    states.emplace_back();
    return static_cast<int>(states.size() - 1);
  }
  void Eps(int a, int b) { states[static_cast<size_t>(a)].eps.push_back(b); }
  void Move(int a, uint8_t lo, uint8_t hi, int b) {
    states[static_cast<size_t>(a)].moves.push_back({{lo, hi}, b});
  }

  // A fragment for `n` from `from`; returns its end state.
  int Build(const Node& n, int from) {
    switch (n.kind) {
      case Node::Kind::kEmpty:
        return from;
      case Node::Kind::kBytes: {
        int at = from;
        for (char c : n.bytes) {
          const int next = Add();
          Move(at, static_cast<uint8_t>(c), static_cast<uint8_t>(c), next);
          at = next;
        }
        return at;
      }
      case Node::Kind::kSet: {
        const int end = Add();
        for (int c = 0; c < 128; ++c) {
          if (!n.ascii.test(static_cast<size_t>(c))) continue;
          int hi = c;
          while (hi + 1 < 128 && n.ascii.test(static_cast<size_t>(hi + 1))) ++hi;
          Move(from, static_cast<uint8_t>(c), static_cast<uint8_t>(hi), end);
          c = hi;
        }
        if (n.non_ascii) {
          // Any multi-byte character (the string's lexer checks the finer
          // rules of UTF-8): a lead byte and its continuation bytes.
          const int one = Add(), two = Add(), three = Add();
          Move(from, 0xC2, 0xDF, one);
          Move(from, 0xE0, 0xEF, two);
          Move(from, 0xF0, 0xF4, three);
          Move(three, 0x80, 0xBF, two);
          Move(two, 0x80, 0xBF, one);
          Move(one, 0x80, 0xBF, end);
        }
        return end;
      }
      case Node::Kind::kConcat: {
        int at = from;
        for (const Node& c : n.children) at = Build(c, at);
        return at;
      }
      case Node::Kind::kAlt: {
        const int end = Add();
        for (const Node& c : n.children) {
          const int start = Add();
          Eps(from, start);
          Eps(Build(c, start), end);
        }
        return end;
      }
      case Node::Kind::kRepeat: {
        const Node& body = n.children[0];
        int at = from;
        for (int k = 0; k < n.min; ++k) at = Build(body, at);
        if (n.max < 0) {
          // (body)*: a loop back to its start.
          const int loop = Add();
          Eps(at, loop);
          const int end = Build(body, loop);
          Eps(end, loop);
          const int out = Add();
          Eps(loop, out);
          return out;
        }
        const int out = Add();
        for (int k = n.min; k < n.max; ++k) {
          Eps(at, out);
          at = Build(body, at);
        }
        Eps(at, out);
        return out;
      }
    }
    return from;
  }

  std::vector<int> Closure(std::vector<int> set) const {
    std::vector<bool> in(states.size());
    for (int s : set) in[static_cast<size_t>(s)] = true;
    for (size_t k = 0; k < set.size(); ++k) {
      for (int t : states[static_cast<size_t>(set[k])].eps) {
        if (!in[static_cast<size_t>(t)]) {
          in[static_cast<size_t>(t)] = true;
          set.push_back(t);
        }
      }
    }
    std::sort(set.begin(), set.end());
    return set;
  }
};

}  // namespace

class DfaBuilder {
 public:
  static absl::StatusOr<std::shared_ptr<const ByteDfa>> Build(std::string_view pattern) {
    auto tree = Parser(pattern).Pattern();
    if (!tree.ok()) return tree.status();
    Nfa nfa;
    const int start = nfa.Add();
    const int accept = nfa.Build(*tree, start);
    if (nfa.states.size() > 100000) return Bad("the pattern is too large");

    // Subset construction.
    std::map<std::vector<int>, int32_t> ids;
    std::vector<std::vector<int>> sets;
    std::vector<int32_t> next;
    std::vector<bool> accepting;
    auto id_of = [&](std::vector<int> set) -> int32_t {
      auto [it, fresh] = ids.emplace(std::move(set), static_cast<int32_t>(sets.size()));
      if (fresh) {
        sets.push_back(it->first);
        accepting.push_back(std::binary_search(it->first.begin(), it->first.end(), accept));
      }
      return it->second;
    };
    id_of(nfa.Closure({start}));
    for (size_t d = 0; d < sets.size(); ++d) {
      if (sets.size() > ByteDfa::kMaxStates) {
        return Bad(
            absl::StrCat("the pattern needs more than ", ByteDfa::kMaxStates, " automaton states"));
      }
      next.resize((d + 1) * 256, -1);
      std::vector<std::vector<int>> targets(256);
      for (int s : sets[d]) {
        for (const auto& [range, to] : nfa.states[static_cast<size_t>(s)].moves) {
          for (int b = range.first; b <= range.second; ++b) targets[size_t(b)].push_back(to);
        }
      }
      for (int b = 0; b < 256; ++b) {
        if (targets[size_t(b)].empty()) continue;
        const int32_t t = id_of(nfa.Closure(std::move(targets[size_t(b)])));
        next[d * 256 + size_t(b)] = t;
      }
    }
    next.resize(sets.size() * 256, -1);

    // Keep only states from which an accepting state is reachable.
    const size_t n = sets.size();
    std::vector<std::vector<int32_t>> back(n);
    for (size_t d = 0; d < n; ++d) {
      for (int b = 0; b < 256; ++b) {
        const int32_t t = next[d * 256 + size_t(b)];
        if (t >= 0) back[size_t(t)].push_back(static_cast<int32_t>(d));
      }
    }
    std::vector<bool> live(n);
    std::vector<int32_t> todo;
    for (size_t d = 0; d < n; ++d) {
      if (accepting[d]) {
        live[d] = true;
        todo.push_back(static_cast<int32_t>(d));
      }
    }
    while (!todo.empty()) {
      const int32_t d = todo.back();
      todo.pop_back();
      for (int32_t p : back[size_t(d)]) {
        if (!live[size_t(p)]) {
          live[size_t(p)] = true;
          todo.push_back(p);
        }
      }
    }
    if (!live[0]) return Bad("the pattern matches no string");
    for (int32_t& t : next) {
      if (t >= 0 && !live[size_t(t)]) t = -1;
    }
    auto dfa = std::shared_ptr<ByteDfa>(new ByteDfa());
    dfa->next_ = std::move(next);
    dfa->accepting_ = std::move(accepting);
    return std::shared_ptr<const ByteDfa>(std::move(dfa));
  }
};

absl::StatusOr<std::shared_ptr<const ByteDfa>> ByteDfa::FromPattern(std::string_view pattern) {
  return DfaBuilder::Build(pattern);
}

}  // namespace tandem::structured
