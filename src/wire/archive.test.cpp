#include "baton/wire/archive.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace baton {
namespace {

using ::testing::HasSubstr;

struct Config {
  int steps = 0;
  std::string name;
  std::vector<double> weights;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(steps, name, weights);
  }
  bool operator==(const Config&) const = default;
};

struct Pair {
  int a = 0;
  double b = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(a, b);
  }
};

struct Nested {
  std::map<std::string, std::optional<std::vector<std::tuple<int, std::string>>>> table;
  std::variant<std::monostate, Config, std::vector<Config>> choice;
  std::unordered_map<std::string, std::set<std::int64_t>> index;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(table, choice, index);
  }
  bool operator==(const Nested&) const = default;
};

using Complex = std::tuple<std::map<std::string, std::vector<int>>, std::optional<Config>,
                           std::variant<int, std::string>, std::unordered_map<int, bool>>;

Complex sample() {
  return {{{"a", {1, 2, 3}}, {"b", {}}},
          Config{7, "run", {0.5, 1.5}},
          std::string("variant"),
          {{1, true}, {2, false}}};
}

Nested nested_sample() {
  Nested n;
  n.table["x"] = std::vector<std::tuple<int, std::string>>{{1, "one"}, {2, ""}};
  n.table["y"] = std::nullopt;
  n.table[""] = std::vector<std::tuple<int, std::string>>{};
  n.choice = std::vector<Config>{Config{1, "a", {}}, Config{2, "b", {3.0}}};
  n.index["k"] = {-1, 0, std::numeric_limits<std::int64_t>::max()};
  n.index["empty"] = {};
  return n;
}

template <class T>
void expect_round_trip(const T& v) {
  const Body body = encode(v);
  EXPECT_TRUE(body.parts.empty());
  EXPECT_EQ(decode<T>(body), v);
}

// The DecodeError message of decode<T>(b), or "no error".
template <class T>
std::string decode_error(const Body& b, const DecodeLimits& limits = {}) {
  try {
    decode<T>(b, limits);
  } catch (const DecodeError& e) {
    return e.what();
  }
  return "no error";
}

Body raw(const std::string& bytes) {
  Body b;
  b.head = bytes;
  return b;
}

template <class T>
std::string bytes_of(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

TEST(Archive, NumbersAndBoolsRoundTrip) {
  expect_round_trip(42);
  expect_round_trip(-1.25);
  expect_round_trip(1.5f);
  expect_round_trip('c');
  expect_round_trip(std::int8_t{-128});
  expect_round_trip(std::uint16_t{65535});
  expect_round_trip(std::numeric_limits<std::int32_t>::min());
  expect_round_trip(std::numeric_limits<std::int64_t>::min());
  expect_round_trip(std::uint64_t{1} << 63);
  expect_round_trip(std::numeric_limits<double>::infinity());
  expect_round_trip(std::numeric_limits<double>::denorm_min());
  expect_round_trip(true);
  expect_round_trip(false);
  EXPECT_EQ(encode(true).head, std::string(1, '\x01'));
  EXPECT_EQ(encode(false).head, std::string(1, '\x00'));
  EXPECT_EQ(encode(std::uint32_t{7}).head.size(), 4u);
}

TEST(Archive, ContainersRoundTrip) {
  expect_round_trip(std::string("hello"));
  expect_round_trip(std::string());
  expect_round_trip(std::string("with\0nul", 8));
  expect_round_trip(std::vector<int>{});
  expect_round_trip(std::vector<int>{1, -2, 3});
  expect_round_trip(std::vector<bool>{true, false, true});
  expect_round_trip(std::vector<std::string>{"a", "", "ccc"});
  expect_round_trip(std::vector<std::vector<int>>{{1}, {}, {2, 3}});
  expect_round_trip(std::map<std::string, int>{{"a", 1}, {"b", -2}});
  expect_round_trip(std::map<int, std::optional<std::string>>{{1, "x"}, {2, std::nullopt}});
  expect_round_trip(std::unordered_map<std::string, std::vector<int>>{{"a", {1}}, {"b", {}}});
  expect_round_trip(std::set<std::string>{"x", "y"});
  expect_round_trip(std::array<int, 3>{4, 5, 6});
  expect_round_trip(std::pair<int, std::string>{1, "p"});
}

TEST(Archive, OptionalsTuplesAndVariantsRoundTrip) {
  expect_round_trip(std::optional<int>{});
  expect_round_trip(std::optional<int>{3});
  expect_round_trip(std::optional<std::vector<std::string>>{{"a", "b"}});
  expect_round_trip(std::optional<std::optional<int>>{std::optional<int>{}});
  expect_round_trip(std::tuple<int, std::string, double>{1, "two", 3.0});
  expect_round_trip(std::tuple<>{});
  expect_round_trip(std::tuple<bool, std::tuple<int, char>>{true, {1, 'x'}});
  using V = std::variant<int, std::string, std::vector<double>>;
  expect_round_trip(V{5});
  expect_round_trip(V{std::string("x")});
  expect_round_trip(V{std::vector<double>{1.0, 2.0}});
  expect_round_trip(std::variant<std::monostate, int>{});
}

TEST(Archive, UserStructsAndNestingRoundTrip) {
  expect_round_trip(Config{3, "cfg", {1.0}});
  expect_round_trip(Config{});
  expect_round_trip(std::vector<Config>{Config{1, "a", {}}, Config{2, "b", {2.0, 3.0}}});
  expect_round_trip(std::map<std::string, Config>{{"k", Config{1, "v", {}}}});
  EXPECT_EQ(decode<Complex>(encode(sample())), sample());
  expect_round_trip(nested_sample());
  expect_round_trip(Nested{});
}

TEST(Archive, SeveralValuesEncodeAsATuple) {
  const Body many = encode(1, std::string("two"), 3.0, true);
  const Body tuple = encode(std::tuple<int, std::string, double, bool>{1, "two", 3.0, true});
  EXPECT_EQ(many.head, tuple.head);
  const auto [a, b, c, d] = decode<std::tuple<int, std::string, double, bool>>(many);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, "two");
  EXPECT_EQ(c, 3.0);
  EXPECT_TRUE(d);
  EXPECT_TRUE(encode().head.empty());
  Body appended = encode(1);
  encode_into(appended, std::string("x"));
  EXPECT_EQ(appended.head, encode(1, std::string("x")).head);
}

TEST(Archive, NumberFastPathWritesTheArchivesBytes) {
  const Body fast = encode(1, 2.5);
  const Body archived = encode(Pair{1, 2.5});  // through cereal: same fields, same order
  const Body tuple = encode(std::tuple<int, double>{1, 2.5});  // cereal's tuple support
  EXPECT_EQ(fast.head, archived.head);
  EXPECT_EQ(fast.head, tuple.head);
  EXPECT_EQ(fast.head, bytes_of(1) + bytes_of(2.5));
  EXPECT_EQ(fast.head.size(), sizeof(int) + sizeof(double));
  // Each route decodes the other's bytes.
  const auto t = decode<std::tuple<int, double>>(archived);
  EXPECT_EQ(std::get<0>(t), 1);
  EXPECT_EQ(std::get<1>(t), 2.5);
  const Pair p = decode<Pair>(fast);
  EXPECT_EQ(p.a, 1);
  EXPECT_EQ(p.b, 2.5);
  // One number, several widths.
  EXPECT_EQ(encode(std::int8_t{-1}, std::uint64_t{9}, 1.5f).head,
            bytes_of(std::int8_t{-1}) + bytes_of(std::uint64_t{9}) + bytes_of(1.5f));
  EXPECT_EQ(decode<std::int64_t>(encode(std::int64_t{-5})), -5);
  EXPECT_EQ(decode<int>(encode(std::tuple<int>{8})), 8);
  // The fast decoder insists on the exact size.
  EXPECT_THAT((decode_error<std::tuple<int, double>>(encode(1))), HasSubstr("expected 12 bytes"));
  EXPECT_THAT((decode_error<std::tuple<int, double>>(encode(1, 2.5, 3))),
              HasSubstr("expected 12 bytes"));
  EXPECT_THAT(decode_error<int>(raw("abc")), HasSubstr("expected 4 bytes"));
  EXPECT_THAT(decode_error<double>(raw("")), HasSubstr("got 0"));
}

TEST(Archive, SmallBytesTravelInline) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, kOutOfBandThreshold - 1}) {
    const Bytes small = Bytes::copy(std::string(n, 's'));
    const Body body = encode(small);
    EXPECT_TRUE(body.parts.empty()) << n;
    EXPECT_EQ(body.head.size(), 1 + 8 + n);
    const Bytes back = decode<Bytes>(body);
    EXPECT_EQ(back, small);
    EXPECT_EQ(back.size(), n);
  }
}

TEST(Archive, LargeBytesTravelOutOfBandWithoutACopy) {
  const Bytes small = Bytes::copy(std::string(100, 's'));
  const Bytes at = Bytes::copy(std::string(kOutOfBandThreshold, 'L'));
  const Bytes big = Bytes::copy(std::string(1 << 20, 'B'));
  const Body body = encode(small, at, std::string("tail"), big);
  ASSERT_EQ(body.parts.size(), 2u);
  EXPECT_EQ(body.parts[0].data(), at.data());  // encoding does not copy either
  EXPECT_EQ(body.parts[1].data(), big.data());
  EXPECT_LT(body.head.size(), 200u);
  const auto [s, l, tail, b] = decode<std::tuple<Bytes, Bytes, std::string, Bytes>>(body);
  EXPECT_EQ(s, small);
  EXPECT_EQ(l, at);
  EXPECT_EQ(l.data(), at.data());  // the same memory: never copied
  EXPECT_EQ(b.data(), big.data());
  EXPECT_EQ(b.size(), big.size());
  EXPECT_EQ(tail, "tail");
  // A slice of a large buffer travels as that slice.
  const Bytes slice = big.slice(10, kOutOfBandThreshold);
  const Bytes back = decode<Bytes>(encode(slice));
  EXPECT_EQ(back.data(), big.data() + 10);
  EXPECT_EQ(back.size(), kOutOfBandThreshold);
  // Buffers inside containers go out of band too.
  const std::vector<Bytes> many(3, at);
  const Body vbody = encode(many);
  EXPECT_EQ(vbody.parts.size(), 3u);
  for (const Bytes& x : decode<std::vector<Bytes>>(vbody)) EXPECT_EQ(x.data(), at.data());
}

TEST(Archive, TruncationAtEveryOffsetIsADecodeError) {
  const Body whole = encode(sample());
  for (std::size_t n = 0; n < whole.head.size(); ++n) {
    EXPECT_THROW(decode<Complex>(raw(whole.head.substr(0, n))), DecodeError) << "cut at " << n;
  }
  const Body nested = encode(nested_sample());
  for (std::size_t n = 0; n < nested.head.size(); ++n) {
    EXPECT_THROW(decode<Nested>(raw(nested.head.substr(0, n))), DecodeError) << "cut at " << n;
  }
  using WithParts = std::tuple<std::string, Bytes, Bytes>;
  const Body parts = encode(std::string("a"), Bytes::copy(std::string(10, 'x')),
                            Bytes::copy(std::string(kOutOfBandThreshold, 'y')));
  for (std::size_t n = 0; n < parts.head.size(); ++n) {
    Body cut = parts;
    cut.head.resize(n);
    EXPECT_THROW(decode<WithParts>(cut), DecodeError) << "cut at " << n;
  }
}

TEST(Archive, HugeSizeTagsAreRejectedBeforeAllocating) {
  const std::string huge = bytes_of(std::uint64_t{1} << 60);
  EXPECT_THAT(decode_error<std::vector<int>>(raw(huge)), HasSubstr("container of"));
  EXPECT_THAT(decode_error<std::vector<std::string>>(raw(huge)), HasSubstr("container of"));
  EXPECT_THAT(decode_error<std::string>(raw(huge)), HasSubstr("container of"));
  EXPECT_THAT((decode_error<std::map<int, int>>(raw(huge))), HasSubstr("container of"));
  EXPECT_THAT((decode_error<std::unordered_map<int, int>>(raw(huge))), HasSubstr("container of"));
  EXPECT_THAT(decode_error<std::vector<bool>>(raw(huge)), HasSubstr("container of"));
  EXPECT_THAT(decode_error<Bytes>(raw(std::string(1, '\0') + huge)), HasSubstr("container of"));
  const std::string max = bytes_of(std::numeric_limits<std::uint64_t>::max());
  EXPECT_THAT(decode_error<std::string>(raw(max)), HasSubstr("container of"));
}

TEST(Archive, LengthsBeyondTheRemainingBytesAreRejected) {
  // A string announcing 10 bytes with 3 present.
  EXPECT_THAT(decode_error<std::string>(raw(bytes_of(std::uint64_t{10}) + "abc")),
              HasSubstr("container of 10 elements with only 3 bytes left"));
  // An int vector announcing 3 elements (12 bytes) with 8 present.
  EXPECT_THAT(decode_error<std::vector<int>>(raw(bytes_of(std::uint64_t{3}) + std::string(8, 'x'))),
              HasSubstr("truncated payload"));
  // Inline bytes announcing more than is left.
  EXPECT_THAT(decode_error<Bytes>(raw(std::string(1, '\0') + bytes_of(std::uint64_t{5}) + "ab")),
              HasSubstr("container of 5"));
}

TEST(Archive, InvalidTagsAndIndexesAreRejected) {
  EXPECT_THAT(decode_error<bool>(raw(std::string(1, '\x02'))), HasSubstr("invalid bool value 2"));
  EXPECT_THAT(decode_error<bool>(raw(std::string(1, '\xff'))), HasSubstr("invalid bool value 255"));
  EXPECT_THAT(decode_error<std::optional<int>>(raw(std::string(1, '\x07') + bytes_of(1))),
              HasSubstr("invalid bool"));
  using V = std::variant<int, std::string>;
  EXPECT_THAT(decode_error<V>(encode(std::int32_t{5}, 1)), HasSubstr("cannot decode"));
  EXPECT_THAT(decode_error<V>(encode(std::int32_t{2}, 1)), HasSubstr("index"));
  EXPECT_THROW(decode<V>(encode(std::int32_t{-1}, 1)), DecodeError);
  EXPECT_THROW(decode<V>(encode(std::numeric_limits<std::int32_t>::min(), 1)), DecodeError);
  // Bools inside containers: std::vector<bool> element by element, std::array<bool, N> as raw
  // bytes.
  EXPECT_THAT(decode_error<std::vector<bool>>(raw(bytes_of(std::uint64_t{2}) + "\x01\x03")),
              HasSubstr("invalid bool value 3"));
  EXPECT_THAT((decode_error<std::array<bool, 3>>(raw(std::string("\x01\x00\x02", 3)))),
              HasSubstr("invalid bool value 2"));
  EXPECT_EQ((decode<std::array<bool, 3>>(raw(std::string("\x01\x00\x01", 3)))),
            (std::array<bool, 3>{true, false, true}));
  EXPECT_THAT(decode_error<Bytes>(raw(std::string(1, '\x02'))), HasSubstr("invalid bytes tag 2"));
  // An out-of-band reference to a part that is not there.
  EXPECT_THAT(decode_error<Bytes>(raw(std::string(1, '\x01') + bytes_of(std::uint32_t{3}))),
              HasSubstr("part 3 of 0"));
  Body one_part = raw(std::string(1, '\x01') + bytes_of(std::uint32_t{1}));
  one_part.parts.push_back(Bytes::copy("x"));
  EXPECT_THAT(decode_error<Bytes>(one_part), HasSubstr("part 1 of 1"));
  Body max_index =
      raw(std::string(1, '\x01') + bytes_of(std::numeric_limits<std::uint32_t>::max()));
  EXPECT_THROW(decode<Bytes>(max_index), DecodeError);
}

TEST(Archive, TrailingBytesAreRejected) {
  Body trailing = encode(std::string("x"));
  trailing.head += "junk";
  EXPECT_THAT(decode_error<std::string>(trailing), HasSubstr("4 trailing bytes"));
  Body one_more = encode(Config{1, "c", {}});
  one_more.head += '\0';
  EXPECT_THAT(decode_error<Config>(one_more), HasSubstr("1 trailing bytes"));
  EXPECT_THAT(decode_error<std::tuple<>>(raw("z")), HasSubstr("trailing"));
}

TEST(Archive, MaxCountBoundsEveryContainer) {
  DecodeLimits tight;
  tight.max_count = 10;
  EXPECT_THAT(decode_error<std::vector<int>>(encode(std::vector<int>(11, 1)), tight),
              HasSubstr("limit 10"));
  EXPECT_NO_THROW(decode<std::vector<int>>(encode(std::vector<int>(10, 1)), tight));
  EXPECT_THROW(decode<std::string>(encode(std::string(11, 's')), tight), DecodeError);
  EXPECT_NO_THROW(decode<std::string>(encode(std::string(10, 's')), tight));
  std::map<int, int> m;
  for (int i = 0; i < 11; ++i) m[i] = i;
  EXPECT_THROW((decode<std::map<int, int>>(encode(m), tight)), DecodeError);
  EXPECT_THROW(decode<Bytes>(encode(Bytes::copy(std::string(11, 'b'))), tight), DecodeError);
  // The limit applies at every depth.
  const std::vector<std::vector<int>> deep{{1}, std::vector<int>(11, 2)};
  EXPECT_THROW(decode<std::vector<std::vector<int>>>(encode(deep), tight), DecodeError);
  // The limits are copied: a temporary is safe.
  const auto limits_of = [](std::uint64_t n) {
    DecodeLimits l;
    l.max_count = n;
    return l;
  };
  EXPECT_THROW(decode<std::vector<int>>(encode(std::vector<int>(3, 1)), limits_of(2)), DecodeError);
}

// Decodes as T; anything other than success or a DecodeError fails the test.
template <class T>
bool decodes_or_fails_cleanly(const Body& b, int iter) {
  try {
    decode<T>(b);
    return true;
  } catch (const DecodeError&) {
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "iteration " << iter << ": " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << "iteration " << iter << ": a non-standard exception";
  }
  return false;
}

void mutate(std::mt19937& rng, std::string& s) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const std::size_t pos = rng() % s.size();
    switch (rng() % 5) {
      case 0:
        s[pos] = static_cast<char>(rng());
        break;
      case 1:
        s.resize(pos);
        break;
      case 2:
        s.insert(pos, 1, static_cast<char>(rng()));
        break;
      case 3:
        s.erase(pos, 1 + rng() % 8);
        break;
      default: {
        // Overwrite 8 bytes with a small or extreme size-like value.
        const std::uint64_t values[] = {0, 1, 2, 255, 1u << 20, std::uint64_t{1} << 62, ~0ull};
        const std::uint64_t v = values[rng() % 7];
        s.replace(pos, 8, bytes_of(v));
      }
    }
  }
}

TEST(Archive, RandomMutationsDecodeOrFailCleanly) {
  std::mt19937 rng(2024);
  const Body complex = encode(sample());
  const Body nested = encode(nested_sample());
  const Body parts = encode(
      std::vector<Bytes>{Bytes::copy(std::string(kOutOfBandThreshold, 'p')), Bytes::copy("inline")},
      std::optional<std::string>("o"));
  using WithParts = std::tuple<std::vector<Bytes>, std::optional<std::string>>;
  int decoded = 0;
  constexpr int kIterations = 6000;
  for (int iter = 0; iter < kIterations; ++iter) {
    Body a = complex;
    mutate(rng, a.head);
    decoded += decodes_or_fails_cleanly<Complex>(a, iter);
    Body b = nested;
    mutate(rng, b.head);
    decoded += decodes_or_fails_cleanly<Nested>(b, iter);
    Body c = parts;
    mutate(rng, c.head);
    if (rng() % 4 == 0) c.parts.clear();
    decoded += decodes_or_fails_cleanly<WithParts>(c, iter);
    // Decoding as the wrong type is hostile input too.
    decoded += decodes_or_fails_cleanly<Nested>(a, iter);
    decoded += decodes_or_fails_cleanly<std::vector<std::string>>(b, iter);
  }
  EXPECT_LT(decoded, 5 * kIterations);  // the mutations did reach the decoder
}

}  // namespace
}  // namespace baton
