// Shapes, slices and points through cereal: round trips, and hostile, truncated or corrupted
// payloads that throw SliceError and never yield an invalid shape.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "baton/slice/slice.hpp"
#include "slice/slice.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;
using namespace slice_test;  // NOLINT(google-build-using-namespace): this layer's test helpers

template <class... Ts>
std::string to_bytes(const Ts&... values) {
  std::ostringstream os;
  {
    cereal::BinaryOutputArchive ar(os);
    ar(values...);
  }
  return os.str();
}

template <class T>
void read_into(const std::string& bytes, T& out) {
  std::istringstream is(bytes);
  cereal::BinaryInputArchive ar(is);
  ar(out);
}

template <class T>
T from_bytes(const std::string& bytes) {
  T value;
  read_into(bytes, value);
  return value;
}

using Labels = std::vector<std::string>;

TEST(Serialization, RoundTripsThroughCerealBinary) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}}).range("gpus", 2, 7, 2).at("hosts", 1);
  const Shape back = from_bytes<Shape>(to_bytes(s));
  EXPECT_EQ(back, s);
  EXPECT_EQ(back.slice().strides(), s.slice().strides());
  EXPECT_EQ(back.locations(), s.locations());
  EXPECT_EQ(from_bytes<Shape>(to_bytes(Shape())), Shape());
  const Slice odd(3, {2, 1, 4}, {40, 7, 5});
  const Slice slice_back = from_bytes<Slice>(to_bytes(odd));
  EXPECT_EQ(slice_back, odd);
  EXPECT_EQ(slice_back.strides(), odd.strides());
  const Point p = Shape::of({{"hosts", 2}, {"gpus", 8}}).point(13);
  EXPECT_EQ(from_bytes<Point>(to_bytes(p)), p);
  EXPECT_EQ(from_bytes<Point>(to_bytes(Point{})), Point{});
  // The layout is cereal's own for the fields, so hand-written payloads below mean what they say.
  EXPECT_EQ(to_bytes(s),
            to_bytes(s.labels(), s.slice().offset(), s.slice().sizes(), s.slice().strides()));
  EXPECT_EQ(from_bytes<Shape>(to_bytes(Labels{"a", "b"}, std::size_t{1}, Sizes{2, 3}, Sizes{3, 1})),
            Shape({"a", "b"}, Slice(1, {2, 3}, {3, 1})));
}

// A hostile payload throws SliceError before any large allocation and leaves the target as it
// was.
TEST(Serialization, HostilePayloadsThrowSliceError) {
  const Shape before = Shape::of({{"keep", 3}});
  auto shape_error = [&](const std::string& bytes) {
    Shape target = before;
    const std::string e = error_of([&] { read_into(bytes, target); });
    EXPECT_EQ(target, before);
    return e;
  };
  const std::uint64_t huge = std::uint64_t{1} << 62;
  const std::size_t zero = 0;
  EXPECT_EQ(shape_error(to_bytes(Labels{"a"}, zero, Sizes{2, 3}, Sizes{3, 1})),
            "a shape needs one label per dimension: got 1 labels for 2 dimensions");
  EXPECT_EQ(shape_error(to_bytes(huge)),
            "malformed payload: 4611686018427387904 labels (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(std::uint64_t{1}, huge)),
            "malformed payload: 4611686018427387904 label characters (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(Labels{"a"}, zero, huge)),
            "malformed payload: 4611686018427387904 sizes (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(Labels{"a"}, zero, Sizes{2}, huge)),
            "malformed payload: 4611686018427387904 strides (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(Labels(65, "x"))), "malformed payload: 65 labels (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(Labels{std::string(65, 'x')})),
            "malformed payload: 65 label characters (at most 64)");
  EXPECT_EQ(shape_error(to_bytes(Labels{"a"}, zero, Sizes{0}, Sizes{1})),
            "dimension sizes must be at least 1: [0]");
  EXPECT_THAT(shape_error(to_bytes(Labels{"a", "b"}, zero, Sizes{3, 2}, Sizes{2, 3})),
              HasSubstr("interleaved dimensions"));
  EXPECT_THAT(shape_error(to_bytes(Labels{"a"}, kMax, Sizes{2}, Sizes{1})), HasSubstr("overflows"));
  EXPECT_EQ(shape_error(to_bytes(Labels{"a b"}, zero, Sizes{2}, Sizes{1})),
            "invalid dimension name 'a b': use 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(shape_error(to_bytes(Labels{"a", "a"}, zero, Sizes{2, 2}, Sizes{2, 1})),
            "dimension name 'a' appears twice; give each dimension a unique name");

  const Point keep{{"keep"}, {1}, 1};
  auto point_error = [&](const std::string& bytes) {
    Point target = keep;
    const std::string e = error_of([&] { read_into(bytes, target); });
    EXPECT_EQ(target, keep);
    return e;
  };
  EXPECT_EQ(point_error(to_bytes(Labels{"a", "b"}, Sizes{1}, zero)),
            "malformed point: 2 labels and 1 coordinates");
  EXPECT_EQ(point_error(to_bytes(Labels{"a"}, huge)),
            "malformed payload: 4611686018427387904 coordinates (at most 64)");
  EXPECT_EQ(point_error(to_bytes(Labels{"a", "a"}, Sizes{1, 1}, zero)),
            "dimension name 'a' appears twice; give each dimension a unique name");
  EXPECT_EQ(from_bytes<Point>(to_bytes(Labels{"a"}, Sizes{1}, std::size_t{9})),
            (Point{{"a"}, {1}, 9}));
}

TEST(Serialization, TruncatedPayloadsThrowAndLeaveTheTargetAlone) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}}).range("gpus", 1, 8, 3);
  const std::string bytes = to_bytes(s);
  const Shape before = Shape::of({{"keep", 3}});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Shape target = before;
    EXPECT_THROW(read_into(bytes.substr(0, n), target), cereal::Exception) << n << " bytes";
    EXPECT_EQ(target, before);
  }
}

// Random corruption of a valid payload either fails cleanly or yields a valid shape.
TEST(Serialization, CorruptedPayloadsNeverYieldInvalidShapes) {
  Rng rng(99);
  const Shape s = Shape::of({{"hosts", 4}, {"gpus", 8}}).range("gpus", 1, 8, 2);
  const std::string bytes = to_bytes(s);
  int decoded = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bad = bytes;
    for (std::size_t flips = rng.pick(1, 3); flips > 0; --flips) {
      const std::size_t at = rng.pick(0, bad.size() - 1);
      bad[at] = static_cast<char>(rng.pick(0, 2) == 0 ? bad[at] ^ (1 << rng.pick(0, 7))
                                                      : static_cast<char>(rng.pick(0, 255)));
    }
    Shape out;
    try {
      read_into(bad, out);
    } catch (const SliceError&) {
      continue;
    } catch (const cereal::Exception&) {
      continue;
    }
    ++decoded;
    const Slice& sl = out.slice();
    ASSERT_EQ(error_of([&] { Shape(out.labels(), Slice(sl.offset(), sl.sizes(), sl.strides())); }),
              "no error");
    ASSERT_LE(out.num_dims(), kMaxDims);
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace baton
