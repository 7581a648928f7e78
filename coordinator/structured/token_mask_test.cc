// Token masks over real vocabularies (Qwen3's byte-level BPE, Llama 2's
// SentencePiece pieces): the tokens of any valid JSON object, as the
// tokenizer splits it, are allowed one after another and the end ids only
// once it is complete; the mask's bits are the tokens whose bytes fit.
#include "coordinator/structured/token_mask.h"

#include <algorithm>
#include <random>
#include <string>

#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/structured/json_schema.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::structured {
namespace {

// response_format json_object.
SchemaGrammar ObjectGrammar() { return SchemaGrammar(CompiledSchema::AnyObject().get()); }

bool Allowed(const std::string& mask, int32_t id) {
  return (static_cast<uint8_t>(mask[static_cast<size_t>(id / 8)]) >> (id % 8)) & 1;
}

nlohmann::json RandomObject(std::mt19937& rng, int depth) {
  nlohmann::json o = nlohmann::json::object();
  static const char* kWords[] = {"name",      "Paris", "caf\xc3\xa9", "x y",
                                 "tab\there", "\"q\"", "42",          "\xe2\x82\xac"};
  for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
    const std::string key = kWords[rng() % 8];
    switch (rng() % (depth > 0 ? 5 : 3)) {
      case 0:
        o[key] = kWords[rng() % 8];
        break;
      case 1:
        o[key] = static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 8;
        break;
      case 2:
        o[key] = rng() % 2 ? nlohmann::json(true) : nlohmann::json(nullptr);
        break;
      case 3:
        o[key] = nlohmann::json::array({RandomObject(rng, depth - 1), 1});
        break;
      default:
        o[key] = RandomObject(rng, depth - 1);
    }
  }
  return o;
}

// Each bit of `mask` against feeding the token alone to a copy of `g`; how
// many are set.
int64_t CheckBits(const Tokenizer& t, const TokenMasker& masker, const SchemaGrammar& g,
                  const std::string& mask, const std::string& prefix) {
  int64_t allowed = 0;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    SchemaGrammar copy = g;
    const std::string& bytes = masker.Bytes(id);
    const bool fits = !t.IsSpecial(id) && !bytes.empty() && copy.Feed(bytes);
    EXPECT_EQ(Allowed(mask, id), fits) << prefix << " + '" << t.TokenPiece(id) << "'";
    if (Allowed(mask, id) != fits) return -1;
    allowed += fits ? 1 : 0;
  }
  return allowed;
}

class TokenMaskTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Tokenizer& tokenizer() const {
    return GetParam() == "qwen3" ? tandem::testing::Qwen3() : tandem::testing::Llama2();
  }
};

TEST_P(TokenMaskTest, EveryTokenOfAValidObjectIsAllowedAndTheEndOnlyAtItsEnd) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size() + 5);  // the model's may be larger
  ASSERT_TRUE(masker.ok()) << masker.status();
  const int32_t eos = t.eos_ids().front();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int doc = 0; doc < 12; ++doc) {
    const std::string text = RandomObject(rng, 2).dump(rng() % 2 ? -1 : 1);
    const std::vector<int32_t> ids = t.Encode(text, /*add_bos=*/false, /*parse_special=*/false);
    SchemaGrammar g = ObjectGrammar();
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string mask = (*masker)->AllowedMask(g);
      ASSERT_EQ(mask.size(), static_cast<size_t>((t.vocab_size() + 5 + 7) / 8));
      ASSERT_TRUE(Allowed(mask, ids[i]))
          << text << ": token " << i << " '" << t.TokenPiece(ids[i]) << "'";
      EXPECT_FALSE(Allowed(mask, eos)) << text << " before token " << i;
      ASSERT_TRUE(g.Feed((*masker)->Bytes(ids[i])));
    }
    const std::string end = (*masker)->AllowedMask(g);
    EXPECT_TRUE(Allowed(end, eos)) << text;
    for (int64_t id = 0; id < t.vocab_size() + 5; ++id) {
      if ((*masker)->IsEnd(static_cast<int32_t>(id))) continue;
      ASSERT_FALSE(Allowed(end, static_cast<int32_t>(id))) << text << ": " << t.TokenPiece(id);
    }
  }
}

TEST_P(TokenMaskTest, TheBitsAreTheTokensWhoseBytesFit) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  ASSERT_TRUE(masker.ok()) << masker.status();
  for (const char* prefix :
       {"", "{", "{\"na", "{\"a\": ", "{\"a\": [1, 2", "{\"a\": -0.", "{\"a\":\"\\u00"}) {
    SchemaGrammar g = ObjectGrammar();
    ASSERT_TRUE(g.Feed(prefix)) << prefix;
    const std::string mask = (*masker)->AllowedMask(g);
    const int64_t allowed = CheckBits(t, **masker, g, mask, prefix);
    EXPECT_GT(allowed, 0) << prefix;
    const std::string p = prefix;
    const bool in_string = std::count(p.begin(), p.end(), '"') % 2 == 1;
    if (!in_string) EXPECT_LT(allowed, t.vocab_size() / 20) << prefix;  // a constraint
  }
  // At the start of an object-only answer: '{' yes, '[' no; no special token.
  SchemaGrammar start = ObjectGrammar();
  const std::string mask = (*masker)->AllowedMask(start);
  const std::vector<int32_t> brace = t.Encode("{", false, false);
  const std::vector<int32_t> bracket = t.Encode("[", false, false);
  ASSERT_EQ(brace.size(), 1u);
  ASSERT_EQ(bracket.size(), 1u);
  EXPECT_TRUE(Allowed(mask, brace[0]));
  EXPECT_FALSE(Allowed(mask, bracket[0]));
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (t.IsSpecial(id)) EXPECT_FALSE(Allowed(mask, id)) << t.TokenPiece(id);
  }
}

// The same under a JSON Schema (the walk over the vocabulary in byte order
// against each token fed alone), and a valid answer's tokens are allowed
// one after another, the end only after the last.
TEST_P(TokenMaskTest, SchemaMasksAreTheTokensWhoseBytesFit) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  ASSERT_TRUE(masker.ok()) << masker.status();
  auto schema = CompiledSchema::Parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12}, "rank": {"type": "integer"},
      "kind": {"enum": ["capital", "town", 3]},
      "tags": {"type": "array", "items": {"type": ["string", "null"]}, "maxItems": 2}},
      "required": ["city", "kind"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  for (const char* prefix :
       {"", "{", "{\"c", "{\"city\": \"Par", "{\"city\": \"123456789012",
        "{\"city\": \"x\", \"kind\": \"ca", "{\"city\": \"x\", \"rank\": -1",
        "{\"city\": \"x\", \"kind\": 3, \"tags\": [null, ", "{\"city\": \"x\", \"kind\": 3"}) {
    SchemaGrammar g(schema->get());
    ASSERT_TRUE(g.Feed(prefix)) << prefix;
    const std::string mask = (*masker)->ComputeMask(g);
    const int64_t allowed = CheckBits(t, **masker, g, mask, prefix);
    EXPECT_GT(allowed, 0) << prefix;
  }
  // Properties come in the declared order: "kind" cannot come first, as
  // "city" before it is required.
  EXPECT_FALSE(SchemaGrammar(schema->get()).Feed("{\"kind\""));
  const std::string answer =
      "{\"city\": \"Paris\", \"kind\": \"capital\", \"tags\": [\"old\", null]}";
  const std::vector<int32_t> ids = t.Encode(answer, /*add_bos=*/false, /*parse_special=*/false);
  const int32_t eos = t.eos_ids().front();
  SchemaGrammar g(schema->get());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string mask = (*masker)->AllowedMask(g);
    ASSERT_TRUE(Allowed(mask, ids[i])) << "token " << i << " '" << t.TokenPiece(ids[i]) << "'";
    EXPECT_FALSE(Allowed(mask, eos)) << "before token " << i;
    ASSERT_TRUE(g.Feed((*masker)->Bytes(ids[i])));
  }
  EXPECT_TRUE(Allowed((*masker)->AllowedMask(g), eos));
}

// The cache: masks handed out from it are the masks computed afresh, and
// states that compare equal (what the cache keys on) have equal masks.
TEST_P(TokenMaskTest, CachedMasksAreTheComputedOnes) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  ASSERT_TRUE(masker.ok()) << masker.status();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<SchemaGrammar> seen;
  int equal_pairs = 0;
  for (int doc = 0; doc < 3; ++doc) {
    const std::string text = RandomObject(rng, 2).dump(1);
    SchemaGrammar g = ObjectGrammar();
    for (char c : text) {
      const std::string fresh = (*masker)->ComputeMask(g);
      ASSERT_EQ((*masker)->AllowedMask(g), fresh) << text;
      // Each state's first equal one is checked, and an eighth of the rest
      // (all of them would be quadratic in ComputeMask calls). Every
      // document starts in the same state, so the second one's first state
      // always has an equal one: sampling them all (as before) found none
      // for some seeds.
      bool checked = false;
      for (const SchemaGrammar& other : seen) {
        if (other == g && (!checked || rng() % 8 == 0)) {
          checked = true;
          ++equal_pairs;
          ASSERT_EQ((*masker)->ComputeMask(other), fresh) << text;
        }
      }
      seen.push_back(g);
      ASSERT_TRUE(g.Feed(static_cast<uint8_t>(c)));
    }
  }
  EXPECT_GT((*masker)->cache_hits(), 0);
  EXPECT_GT(equal_pairs, 0);
}

// A second request with the same schema text (sent again, as clients
// resend their response_format and tools) gets the same compiled schema
// and so the first request's masks: its answer computes none.
TEST_P(TokenMaskTest, ARequestWithTheSameSchemaReusesTheMasks) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  ASSERT_TRUE(masker.ok()) << masker.status();
  EXPECT_GE((*masker)->max_cached_masks(), TokenMasker::kMinCachedMasks);
  EXPECT_LE((*masker)->max_cached_masks(), TokenMasker::kMaxCachedMasks);
  const std::string schema =
      R"({"type": "object", "properties": {"answer": {"type": "string"},
          "score": {"type": "integer", "minimum": 0}}, "required": ["answer", "score"]})";
  const std::string answer = R"({"answer": "forty two", "score": 42})";
  const std::vector<int32_t> ids = t.Encode(answer, /*add_bos=*/false, /*parse_special=*/false);
  auto walk = [&](const std::shared_ptr<const CompiledSchema>& compiled) {
    SchemaGrammar g(compiled.get());
    for (int32_t id : ids) {
      const std::string mask = (*masker)->AllowedMask(g);
      ASSERT_TRUE(Allowed(mask, id)) << id;
      ASSERT_TRUE(g.Feed((*masker)->Bytes(id)));
    }
    ASSERT_TRUE(g.IsComplete());
  };
  auto first = CompiledSchema::Parse(schema);
  ASSERT_TRUE(first.ok()) << first.status();
  walk(*first);
  const int64_t computed = (*masker)->cache_misses();
  EXPECT_GT(computed, 0);
  // The request is over; the next one compiles the schema again.
  const uint64_t first_id = (*first)->id();
  first->reset();
  auto second = CompiledSchema::Parse(schema);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->id(), first_id);
  const int64_t hits = (*masker)->cache_hits();
  walk(*second);
  EXPECT_EQ((*masker)->cache_misses(), computed);
  EXPECT_EQ((*masker)->cache_hits() - hits, static_cast<int64_t>(ids.size()));
}

// A step's masks together: each the mask computed afresh, each distinct
// state computed once however many sequences share it, on several threads.
TEST_P(TokenMaskTest, AStepsMasksAreComputedOncePerState) {
  const Tokenizer& t = tokenizer();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  ASSERT_TRUE(masker.ok()) << masker.status();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  // Prefixes of a few random objects: some states repeat ("{" opens every
  // one), most do not.
  std::vector<SchemaGrammar> grammars;
  for (int doc = 0; doc < 4; ++doc) {
    const std::string text = RandomObject(rng, 2).dump();
    SchemaGrammar g = ObjectGrammar();
    const size_t cut = rng() % (text.size() / 2 + 1);
    ASSERT_TRUE(g.Feed(std::string_view(text).substr(0, cut))) << text;
    grammars.push_back(g);
    grammars.push_back(g);  // another request at the same state
    grammars.push_back(ObjectGrammar());
  }
  std::vector<const SchemaGrammar*> states;
  for (const SchemaGrammar& g : grammars) states.push_back(&g);
  std::vector<SchemaGrammar> distinct;
  for (const SchemaGrammar& g : grammars) {
    if (std::find(distinct.begin(), distinct.end(), g) == distinct.end()) distinct.push_back(g);
  }
  const std::vector<std::string> masks = (*masker)->AllowedMasks(states, 4);
  ASSERT_EQ(masks.size(), states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    EXPECT_EQ(masks[i], (*masker)->ComputeMask(*states[i])) << i;
  }
  EXPECT_EQ((*masker)->cache_misses(), static_cast<int64_t>(distinct.size()));
  // Asked again, all come from the cache.
  EXPECT_EQ((*masker)->AllowedMasks(states, 4), masks);
  EXPECT_EQ((*masker)->cache_misses(), static_cast<int64_t>(distinct.size()));
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenMaskTest, ::testing::Values("qwen3", "llama2"));

}  // namespace
}  // namespace tandem::structured
