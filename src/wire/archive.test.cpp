#include "baton/wire/archive.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <unordered_map>
#include <variant>

namespace baton {
namespace {

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

using Complex = std::tuple<std::map<std::string, std::vector<int>>, std::optional<Config>,
                           std::variant<int, std::string>, std::unordered_map<int, bool>>;

Complex sample() {
  return {{{"a", {1, 2, 3}}, {"b", {}}},
          Config{7, "run", {0.5, 1.5}},
          std::string("variant"),
          {{1, true}, {2, false}}};
}

template <class T>
void expect_round_trip(const T& v) {
  EXPECT_EQ(decode<T>(encode(v)), v);
}

TEST(Archive, OrdinaryTypesRoundTrip) {
  expect_round_trip(42);
  expect_round_trip(-1.25);
  expect_round_trip(true);
  expect_round_trip(std::uint64_t{1} << 63);
  expect_round_trip(std::string("hello"));
  expect_round_trip(std::string());
  expect_round_trip(std::vector<std::string>{"a", "", "ccc"});
  expect_round_trip(std::optional<int>{});
  expect_round_trip(std::optional<int>{3});
  expect_round_trip(std::variant<int, std::string>{std::string("x")});
  expect_round_trip(Config{3, "cfg", {1.0}});
  expect_round_trip(std::vector<std::vector<int>>{{1}, {}, {2, 3}});
  EXPECT_EQ(decode<Complex>(encode(sample())), sample());
}

TEST(Archive, NumberFastPathWritesTheArchivesBytes) {
  const Body fast = encode(1, 2.5);
  const Body archived = encode(Pair{1, 2.5});  // through cereal: same fields, same order
  EXPECT_EQ(fast.head, archived.head);
  EXPECT_EQ(fast.head.size(), sizeof(int) + sizeof(double));
  const auto t = decode<std::tuple<int, double>>(archived);
  EXPECT_EQ(std::get<0>(t), 1);
  EXPECT_EQ(std::get<1>(t), 2.5);
  const Pair p = decode<Pair>(fast);
  EXPECT_EQ(p.a, 1);
  EXPECT_EQ(p.b, 2.5);
  EXPECT_THROW((decode<std::tuple<int, double>>(encode(1))), DecodeError);
}

TEST(Archive, LargeBytesTravelOutOfBandWithoutACopy) {
  const Bytes small = Bytes::copy(std::string(100, 's'));
  const Bytes large = Bytes::copy(std::string(kOutOfBandThreshold, 'L'));
  const Body body = encode(small, large, std::string("tail"));
  ASSERT_EQ(body.parts.size(), 1u);
  EXPECT_LT(body.head.size(), 200u);
  const auto [s, l, tail] = decode<std::tuple<Bytes, Bytes, std::string>>(body);
  EXPECT_EQ(s, small);
  EXPECT_EQ(l, large);
  EXPECT_EQ(l.data(), large.data());  // the same memory: never copied
  EXPECT_EQ(tail, "tail");
}

template <class T>
std::string decode_error(const Body& b) {
  try {
    decode<T>(b);
  } catch (const DecodeError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Archive, HostileBytesAreDecodeErrors) {
  // Every truncation of a complex value.
  const Body whole = encode(sample());
  for (std::size_t n = 0; n < whole.head.size(); ++n) {
    Body cut;
    cut.head = whole.head.substr(0, n);
    EXPECT_THROW(decode<Complex>(cut), DecodeError) << "truncated at " << n;
  }
  Body huge;
  const std::uint64_t n = std::uint64_t{1} << 60;
  huge.head.assign(reinterpret_cast<const char*>(&n), sizeof(n));
  EXPECT_THAT(decode_error<std::vector<int>>(huge), ::testing::HasSubstr("container of"));
  EXPECT_THAT(decode_error<std::string>(huge), ::testing::HasSubstr("container of"));
  Body long_string = encode(std::uint64_t{10});
  long_string.head += "abc";
  EXPECT_THROW(decode<std::string>(long_string), DecodeError);
  Body bad_bool;
  bad_bool.head = std::string(1, '\x02');
  EXPECT_THAT(decode_error<bool>(bad_bool), ::testing::HasSubstr("invalid bool"));
  const Body bad_variant = encode(std::int32_t{5}, 1);
  EXPECT_THROW((decode<std::variant<int, std::string>>(bad_variant)), DecodeError);
  Body trailing = encode(std::string("x"));
  trailing.head += "junk";
  EXPECT_THAT(decode_error<std::string>(trailing), ::testing::HasSubstr("trailing"));
  Body bad_part;
  bad_part.head = std::string("\x01\x03\x00\x00\x00", 5);  // part 3 of none
  EXPECT_THAT(decode_error<Bytes>(bad_part), ::testing::HasSubstr("part 3 of 0"));
  DecodeLimits tight;
  tight.max_count = 10;
  EXPECT_THROW(decode<std::vector<int>>(encode(std::vector<int>(11, 1)), tight), DecodeError);
  EXPECT_NO_THROW(decode<std::vector<int>>(encode(std::vector<int>(10, 1)), tight));
}

TEST(Archive, RandomMutationsDecodeOrFailCleanly) {
  std::mt19937 rng(2024);
  const Body base = encode(sample());
  int decoded = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    Body b = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      if (b.head.empty()) break;
      const std::size_t pos = rng() % b.head.size();
      switch (rng() % 3) {
        case 0:
          b.head[pos] = static_cast<char>(rng());
          break;
        case 1:
          b.head.resize(pos);
          break;
        default:
          b.head.insert(pos, 1, static_cast<char>(rng()));
      }
    }
    try {
      decode<Complex>(b);
      ++decoded;
    } catch (const DecodeError&) {
    }
  }
  EXPECT_LT(decoded, 5000);  // the mutations did reach the decoder
}

}  // namespace
}  // namespace baton
