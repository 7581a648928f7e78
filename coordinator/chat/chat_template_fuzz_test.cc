// Fuzz-style robustness: random mutations of the real chat templates (and of
// the feature templates) must parse or fail cleanly, and whatever parses must
// render or fail cleanly within tight limits: an OK or InvalidArgument status,
// never a crash, a hang or another code.
//
// Each run draws a fresh seed and prints it. Replay a failure with
// TANDEM_CHAT_FUZZ_SEED=<seed>; run longer with TANDEM_CHAT_FUZZ_ITERS=<n>.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

struct Corpus {
  std::vector<std::string> templates;
  std::vector<Json> contexts;
};

const Corpus& GetCorpus() {
  static const Corpus* corpus = [] {
    auto* c = new Corpus;
    const std::string dir =
        std::string(TANDEM_TESTDATA_DIR) + "/chat_templates";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      const Json j = Json::parse(ss.str());
      if (j.contains("template")) {
        c->templates.push_back(j["template"].get<std::string>());
        // A few contexts per model: plain, tool calls, reasoning.
        for (size_t i = 0; i < j["cases"].size(); i += 7)
          c->contexts.push_back(j["cases"][i]["context"]);
      } else {
        c->contexts.push_back(j["context"]);
        for (const Json& k : j["cases"])
          c->templates.push_back(k["template"].get<std::string>());
      }
    }
    return c;
  }();
  return *corpus;
}

uint64_t Seed() {
  if (const char* s = std::getenv("TANDEM_CHAT_FUZZ_SEED"))
    return std::strtoull(s, nullptr, 10);
  return std::random_device()() * 0x100000001ull ^ std::random_device()();
}

int Iterations(int def) {
  if (const char* s = std::getenv("TANDEM_CHAT_FUZZ_ITERS"))
    return std::atoi(s);
  return def;
}

// Pieces that steer mutations towards interesting syntax.
const std::vector<std::string>& Dictionary() {
  static const auto* d = new std::vector<std::string>{
      "{%",
      "%}",
      "{{",
      "}}",
      "{#",
      "#}",
      "{%-",
      "-%}",
      "{{-",
      "-}}",
      "{%+",
      "+%}",
      "(",
      ")",
      "[",
      "]",
      "{",
      "}",
      "|",
      "~",
      ".",
      ",",
      ":",
      "'",
      "\"",
      "\\",
      "-",
      "+",
      "*",
      "**",
      "/",
      "//",
      "%",
      "==",
      "!=",
      "<",
      ">=",
      "=",
      " if ",
      " else ",
      " elif ",
      " endif ",
      " for ",
      " in ",
      " endfor ",
      " not ",
      " and ",
      " or ",
      " is ",
      " set ",
      " macro ",
      " endmacro ",
      " call ",
      " endcall ",
      " raw ",
      " endraw ",
      " filter ",
      " endfilter ",
      " with ",
      " break ",
      " continue ",
      " loop ",
      "loop.index",
      "loop.last",
      "caller()",
      "varargs",
      "kwargs",
      "namespace(",
      "ns.",
      "range(",
      "raise_exception(",
      "dict(",
      "strftime_now(",
      "|tojson",
      "|length",
      "|join(",
      "|map(",
      "|selectattr(",
      "|default(",
      "|trim",
      "|indent(",
      "|sort",
      "|unique",
      "|list",
      "|first",
      "|last",
      "|items",
      "|string",
      "|int",
      "|format(",
      "[::-1]",
      "[1:]",
      ".split(",
      ".strip(",
      ".format(",
      "messages",
      "message",
      "tools",
      "none",
      "true",
      "1e308",
      "-1",
      "0",
      "99999999999",
      "'%s'",
      "'{}'",
      "\n",
      " ",
      "\t",
      "é",
      "\xff",
      "\xc3",
      std::string("\0", 1),
      "\xf0\x9f\x98",
  };
  return *d;
}

std::string Mutate(const std::string& src, const Corpus& corpus,
                   std::mt19937_64& rng) {
  std::string s = src;
  auto pick = [&](size_t n) {
    return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n);
  };
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t pos = pick(s.size() + 1);
    switch (rng() % 7) {
      case 0:  // delete a span
        s.erase(pos, 1 + pick(8));
        break;
      case 1:
      case 2:  // insert a dictionary token
        s.insert(pos, Dictionary()[pick(Dictionary().size())]);
        break;
      case 3:  // overwrite a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng() & 0xFF);
        break;
      case 4: {  // duplicate a span (deepens nesting)
        const size_t len = 1 + pick(64);
        s.insert(pos, s.substr(pos, len));
        break;
      }
      case 5: {  // splice in a span of another template
        const std::string& other =
            corpus.templates[pick(corpus.templates.size())];
        const size_t at = pick(other.size() + 1);
        s.insert(pos, other.substr(at, 1 + pick(80)));
        break;
      }
      default: {  // truncate
        s.resize(pos);
        break;
      }
    }
  }
  return s;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

ChatTemplateLimits TightLimits() {
  ChatTemplateLimits lim;
  lim.max_steps = 200'000;
  lim.max_output_bytes = 1u << 20;
  lim.max_total_string_bytes = 16u << 20;
  lim.max_call_depth = 40;
  lim.max_container_nodes = 200'000;
  return lim;
}

// Parses and renders; returns false (after recording a failure) when a status
// is anything but OK / InvalidArgument.
bool Exercise(const std::string& src, const Corpus& corpus,
              std::mt19937_64& rng, int* parsed, int* rendered) {
  auto t = ChatTemplate::Parse(src);
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument)
        << t.status();
    EXPECT_FALSE(t.status().message().empty());
    return t.status().code() == absl::StatusCode::kInvalidArgument;
  }
  ++*parsed;
  for (int r = 0; r < 2; ++r) {
    const Json& ctx = corpus.contexts[rng() % corpus.contexts.size()];
    auto out = t->Render(ctx, TightLimits());
    if (out.ok()) {
      ++*rendered;
      EXPECT_LE(out->size(), TightLimits().max_output_bytes);
    } else if (out.status().code() != absl::StatusCode::kInvalidArgument ||
               out.status().message().empty()) {
      ADD_FAILURE() << out.status();
      return false;
    }
  }
  return true;
}

TEST(ChatTemplateFuzz, MutatedTemplatesParseOrFailCleanly) {
  const Corpus& corpus = GetCorpus();
  ASSERT_GT(corpus.templates.size(), 100u);
  const uint64_t seed = Seed();
  std::cerr << "chat template fuzz seed: " << seed
            << " (replay with TANDEM_CHAT_FUZZ_SEED=" << seed << ")\n";
  std::mt19937_64 rng(seed);
  int parsed = 0, rendered = 0;
  const int iters = Iterations(4000);
  for (int i = 0; i < iters; ++i) {
    const std::string& base = corpus.templates[rng() % corpus.templates.size()];
    const std::string src = Mutate(base, corpus, rng);
    if (!Exercise(src, corpus, rng, &parsed, &rendered)) {
      FAIL() << "seed " << seed << ", iteration " << i << ", template:\n"
             << Printable(src);
    }
  }
  std::cerr << "  " << iters << " mutants: " << parsed << " parsed, "
            << rendered << " renders succeeded\n";
  EXPECT_GT(parsed, iters / 20);
}

TEST(ChatTemplateFuzz, RandomTokenSoupParsesOrFailsCleanly) {
  const Corpus& corpus = GetCorpus();
  const uint64_t seed = Seed();
  std::cerr << "chat template token-soup seed: " << seed << "\n";
  std::mt19937_64 rng(seed);
  const auto& dict = Dictionary();
  int parsed = 0, rendered = 0;
  const int iters = Iterations(3000);
  for (int i = 0; i < iters; ++i) {
    // Well-formed skeletons filled with random token soup, so that the soup
    // often reaches the expression parser and the evaluator.
    static const char* kSkeletons[] = {"{{ %s }}",
                                       "{% if %s %}x{% endif %}",
                                       "{% for x in %s %}{{ x }}{% endfor %}",
                                       "{% set v = %s %}{{ v }}",
                                       "{{ messages|%s }}",
                                       "%s"};
    std::string soup;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      const uint64_t r = rng() % 10;
      if (r < 6) {
        soup += dict[rng() % dict.size()];
      } else if (r < 8) {
        soup += std::to_string(static_cast<int64_t>(rng() % 2000) - 1000);
      } else {
        soup += "xs";
      }
    }
    std::string src = kSkeletons[rng() % 6];
    src.replace(src.find("%s"), 2, soup);
    if (!Exercise(src, corpus, rng, &parsed, &rendered)) {
      FAIL() << "seed " << seed << ", iteration " << i << ", template:\n"
             << Printable(src);
    }
  }
  std::cerr << "  " << iters << " soups: " << parsed << " parsed, " << rendered
            << " renders succeeded\n";
}

}  // namespace
}  // namespace tandem
