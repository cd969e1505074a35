// baton::Value on the wire: every kind round-trips, and hostile bytes (a tag out of range, a
// nesting deeper than the bound) are refused with a DecodeError, not followed.

#include "baton/wire/value.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

TEST(Value, EveryKindRoundTrips) {
  Value::Dict d;
  d.emplace_back("b", Value{true});
  d.emplace_back("z", Value{std::int64_t{-7}});
  d.emplace_back("a", Value{2.5});
  Value::List l{Value{}, Value{std::string("text")}, Value{Bytes::copy(std::string(10000, 'x'))},
                Value{std::move(d)}};
  const Value in{std::move(l)};
  const Value out = decode<Value>(encode(in));
  const auto& list = std::get<Value::List>(out.v);
  ASSERT_EQ(list.size(), 4u);
  EXPECT_TRUE(list[0].is_none());
  EXPECT_EQ(std::get<std::string>(list[1].v), "text");
  EXPECT_EQ(std::get<Bytes>(list[2].v).size(), 10000u);  // big bytes travel as a part
  const auto& dict = std::get<Value::Dict>(list[3].v);
  ASSERT_EQ(dict.size(), 3u);
  EXPECT_EQ(dict[0].first, "b");  // in order, not sorted
  EXPECT_EQ(std::get<bool>(dict[0].second.v), true);
  EXPECT_EQ(std::get<std::int64_t>(dict[1].second.v), -7);
  EXPECT_EQ(std::get<double>(dict[2].second.v), 2.5);
  EXPECT_STREQ(list[3].kind(), "dict");
}

TEST(Value, ATagOutOfRangeIsRefused) {
  Body b = encode(Value{std::int64_t{1}});
  b.head[0] = 9;
  EXPECT_THROW((void)decode<Value>(b), DecodeError);
}

TEST(Value, NestingDeeperThanTheBoundIsRefusedNotFollowed) {
  // Bytes of a list inside a list ... 100000 deep, made by hand: tag 6, count 1, repeated.
  std::string head;
  for (int i = 0; i < 100000; ++i) {
    head += static_cast<char>(6);
    const std::uint64_t one = 1;
    head.append(reinterpret_cast<const char*>(&one), sizeof one);
  }
  head += static_cast<char>(0);
  Body b;
  b.head = head;
  try {
    (void)decode<Value>(b);
    FAIL() << "a value nested 100000 deep was decoded";
  } catch (const DecodeError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nested deeper than 64"));
  }
  // Within the bound it decodes.
  Value v{};
  for (int i = 0; i < Value::kMaxDepth - 1; ++i) v = Value{Value::List{v}};
  EXPECT_NO_THROW((void)decode<Value>(encode(v)));
}

}  // namespace
}  // namespace baton
