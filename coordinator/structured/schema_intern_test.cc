// The interning table's limits: the least recently used entries go first,
// by count and by the bytes of their keys; a key too long is never kept.
#include "coordinator/structured/schema_intern.h"

#include <string>

#include "coordinator/structured/json_schema.h"
#include "gtest/gtest.h"

namespace tandem::structured {
namespace {

std::shared_ptr<const CompiledSchema> Schema(int i) {
  auto s = CompiledSchema::Choice({"choice " + std::to_string(i)});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

TEST(SchemaInternTest, KeepsTheMostRecentlyUsed) {
  SchemaInterner table;
  const auto first = Schema(0);
  EXPECT_EQ(table.Insert("k0", first), first);
  // A second compilation for a key already there gives the first.
  EXPECT_EQ(table.Insert("k0", Schema(1)), first);
  for (int i = 1; i < SchemaInterner::kMaxEntries; ++i)
    table.Insert("k" + std::to_string(i), Schema(i));
  EXPECT_EQ(table.size(), SchemaInterner::kMaxEntries);
  // Using k0 makes k1 the oldest, which the next insert drops.
  EXPECT_EQ(table.Find("k0"), first);
  table.Insert("new", Schema(100));
  EXPECT_EQ(table.size(), SchemaInterner::kMaxEntries);
  EXPECT_EQ(table.Find("k1"), nullptr);
  EXPECT_EQ(table.Find("k0"), first);
  EXPECT_NE(table.Find("k2"), nullptr);
  EXPECT_NE(table.Find("new"), nullptr);
  EXPECT_EQ(table.hits(), 4);
}

TEST(SchemaInternTest, KeyBytesAreBounded) {
  SchemaInterner table;
  const size_t big = SchemaInterner::kMaxKeyBytes / 4;
  // Four keys of the largest size fill the table's bytes; a fifth drops
  // the oldest.
  for (int i = 0; i < 5; ++i) {
    std::string key(big, 'a');
    key[0] = static_cast<char>('0' + i);
    table.Insert(key, Schema(i));
  }
  EXPECT_EQ(table.size(), 4);
  std::string oldest(big, 'a');
  oldest[0] = '0';
  EXPECT_EQ(table.Find(oldest), nullptr);
  // A longer key is not kept, but its schema is given back.
  const auto s = Schema(9);
  EXPECT_FALSE(SchemaInterner::Internable(std::string(big + 1, 'b')));
  EXPECT_EQ(table.Insert(std::string(big + 1, 'b'), s), s);
  EXPECT_EQ(table.Find(std::string(big + 1, 'b')), nullptr);
  EXPECT_EQ(table.size(), 4);
}

}  // namespace
}  // namespace tandem::structured
