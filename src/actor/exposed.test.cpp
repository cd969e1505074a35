// Values to and from C++ types for actors exposed to Python (baton/python/expose.hpp): each
// supported type converts both ways, and a value of the wrong kind is refused naming the
// argument and what was expected.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "baton/python/expose.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

template <class T>
T round_trip(const T& x) {
  return from_value<T>(decode<Value>(encode(to_value(x))), "x");
}

TEST(Exposed, SupportedTypesConvertBothWays) {
  EXPECT_EQ(round_trip(42), 42);
  EXPECT_EQ(round_trip(std::uint8_t{200}), 200);
  EXPECT_EQ(round_trip(true), true);
  EXPECT_EQ(round_trip(0.25F), 0.25F);
  EXPECT_EQ(round_trip(std::string("s")), "s");
  EXPECT_EQ(round_trip(std::vector<double>{1, 2.5}), (std::vector<double>{1, 2.5}));
  const std::map<std::string, std::vector<int>> m{{"a", {1}}, {"b", {}}};
  EXPECT_EQ(round_trip(m), m);
  EXPECT_EQ(round_trip(std::optional<int>{}), std::nullopt);
  EXPECT_EQ(round_trip(std::optional<int>{3}), 3);
  EXPECT_EQ(round_trip(std::make_tuple(1, std::string("x"))), std::make_tuple(1, std::string("x")));
  EXPECT_EQ(round_trip(std::make_pair(2.0, 3)), std::make_pair(2.0, 3));
  // An integer where a float is wanted is taken (Python's 1 for 1.0).
  EXPECT_EQ(from_value<double>(Value{std::int64_t{1}}, "x"), 1.0);
}

TEST(Exposed, AValueOfTheWrongKindIsRefusedNamingTheArgument) {
  try {
    (void)from_value<std::vector<int>>(Value{Value::List{Value{std::string("no")}}}, "argument 2");
    FAIL() << "a str became an int";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("argument 2[0]: expected int, got str"));
  }
  EXPECT_THROW((void)from_value<std::uint8_t>(Value{std::int64_t{300}}, "x"),
               std::invalid_argument);
  EXPECT_THROW((void)(from_value<std::tuple<int, int>>(Value{Value::List{}}, "x")),
               std::invalid_argument);
}

class First : public Actor {
 public:
  int one() { return 1; }
  static constexpr auto endpoints = baton::endpoints<&First::one>();
};
class Second : public Actor {
 public:
  int two() { return 2; }
  static constexpr auto endpoints = baton::endpoints<&Second::two>();
};

TEST(ExposedDeathTest, TwoTypesUnderOneNameStopTheProgramSayingSo) {
  // A worker could not tell which to build: the runtime stops at registration instead.
  EXPECT_DEATH(
      {
        (void)expose<First>("Same");
        (void)expose<Second>("Same");
      },
      "two different actor types are both named");
}

}  // namespace
}  // namespace baton
