#include "baton/slice/slice.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const SliceError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Slice, RowMajorLocationsAndRanks) {
  const Slice s = Slice::row_major({2, 3});
  EXPECT_EQ(s.strides(), (std::vector<std::size_t>{3, 1}));
  EXPECT_EQ(s.len(), 6u);
  EXPECT_THAT(s.locations(), ElementsAre(0, 1, 2, 3, 4, 5));
  const std::vector<std::size_t> c = {1, 2};
  EXPECT_EQ(s.location(c), 5u);
  EXPECT_EQ(s.coordinates(4), (std::vector<std::size_t>{1, 1}));
  EXPECT_EQ(Slice().len(), 1u);
}

TEST(Slice, StridedSliceRejectsLocationsInItsGaps) {
  const Slice s(1, {2, 2}, {8, 2});  // {1, 3, 9, 11}
  EXPECT_THAT(s.locations(), ElementsAre(1, 3, 9, 11));
  EXPECT_FALSE(s.contains(2));
  EXPECT_FALSE(s.contains(0));
  EXPECT_FALSE(s.contains(13));
  EXPECT_EQ(s.rank_of_location(9), 2u);
  EXPECT_THAT(error_of([&] { s.coordinates(5); }), HasSubstr("location 5 is not in"));
}

TEST(Slice, InvalidSlicesAreRejected) {
  EXPECT_THAT(error_of([] { Slice(0, {2}, {1, 1}); }), HasSubstr("one stride per size"));
  EXPECT_THAT(error_of([] { Slice(0, {0}, {1}); }), HasSubstr("at least 1"));
  EXPECT_THAT(error_of([] {
                Slice(0, {2, std::size_t{1} << 62}, {std::size_t{1} << 62, 4});
              }),
              HasSubstr("overflows"));
}

TEST(Shape, ExhaustiveRankCoordinateRoundTrips) {
  for (std::size_t dims = 0; dims <= 3; ++dims) {
    for (std::size_t a = 1; a <= 4; ++a) {
      for (std::size_t b = 1; b <= 4; ++b) {
        for (std::size_t c = 1; c <= 4; ++c) {
          const std::size_t all[] = {a, b, c};
          std::vector<std::pair<std::string, std::size_t>> spec;
          for (std::size_t d = 0; d < dims; ++d) spec.emplace_back("d" + std::to_string(d), all[d]);
          const Shape shape = Shape::of(spec);
          std::size_t expected_len = 1;
          for (std::size_t d = 0; d < dims; ++d) expected_len *= all[d];
          ASSERT_EQ(shape.len(), expected_len);
          for (std::size_t r = 0; r < shape.len(); ++r) {
            const Point p = shape.point(r);
            ASSERT_EQ(p.rank, r);
            ASSERT_EQ(shape.rank_of(p.coords), r);
            ASSERT_EQ(shape.location(r), r);  // row-major at offset 0
            ASSERT_EQ(shape.slice().coordinates(r), p.coords);
          }
        }
      }
    }
  }
}

TEST(Shape, AtDropsTheDimensionAndRangeKeepsIt) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}});
  EXPECT_EQ(s.to_string(), "{hosts: 2, gpus: 8}");
  const Shape host1 = s.at("hosts", 1);
  EXPECT_EQ(host1.to_string(), "{gpus: 8}");
  EXPECT_THAT(host1.locations(), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  const Shape half = s.range("gpus", 0, 4);
  EXPECT_EQ(half.to_string(), "{hosts: 2, gpus: 4}");
  EXPECT_THAT(half.locations(), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  const Shape odd = s.range("gpus", 1, 8, 2);
  EXPECT_THAT(odd.locations(), ElementsAre(1, 3, 5, 7, 9, 11, 13, 15));
  const Point p = odd.point(5);
  EXPECT_EQ(p.to_string(), "{hosts: 1, gpus: 1}");
  EXPECT_EQ(p["hosts"], 1u);
}

TEST(Shape, ErrorsSayWhatIsWrong) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}});
  EXPECT_EQ(error_of([&] { s.at("gpu", 0); }), "no dimension 'gpu' in shape {hosts: 2, gpus: 8}");
  EXPECT_EQ(error_of([&] { s.range("gpus", 4, 9); }),
            "range 4..9 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.at("gpus", 8); }), "index 8 out of bounds for 'gpus' (size 8)");
  EXPECT_THAT(error_of([&] { s.range("gpus", 3, 3); }), HasSubstr("range 3..3 out of bounds"));
  EXPECT_THAT(error_of([&] { s.split("hosts", {{"dp", 3}}); }), HasSubstr("multiply to 3"));
  EXPECT_THAT(error_of([&] { s.rename("hosts", "gpus"); }), HasSubstr("appears twice"));
  EXPECT_THAT(error_of([&] { Shape::of({{"bad name", 2}}); }), HasSubstr("invalid dimension"));
  EXPECT_THAT(error_of([&] { s.point(16); }), HasSubstr("rank 16 out of bounds"));
  EXPECT_THAT(error_of([&] { (void)s.point(3)["zone"]; }), HasSubstr("no dimension 'zone'"));
  EXPECT_THAT(error_of([&] { s.range("hosts", 0, 2).range("gpus", 0, 8, 3).flatten("all"); }),
              HasSubstr("cannot flatten"));
}

TEST(Shape, SplitFlattenAndRename) {
  const Shape s = Shape::of({{"hosts", 8}, {"gpus", 4}});
  const Shape split = s.split("hosts", {{"dp", 2}, {"pp", 4}});
  EXPECT_EQ(split.to_string(), "{dp: 2, pp: 4, gpus: 4}");
  EXPECT_EQ(split.locations(), s.locations());
  EXPECT_EQ(split.flatten("all").locations(), s.locations());
  EXPECT_EQ(s.at("gpus", 2).flatten("h").locations(), s.at("gpus", 2).locations());
  const Shape renamed = s.rename("gpus", "devices");
  EXPECT_EQ(renamed.size("devices"), 4u);
  EXPECT_FALSE(renamed.has("gpus"));
}

TEST(Shape, SerializesThroughTheWireArchiveAndRevalidates) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}}).range("gpus", 2, 6);
  EXPECT_EQ(decode<Shape>(encode(s)), s);
  const Point p = s.point(3);
  EXPECT_EQ(decode<Point>(encode(p)), p);
  // A hostile peer sends a shape whose labels do not match its dimensions.
  const Body bad = encode(std::vector<std::string>{"only_one"}, s.slice());
  EXPECT_THROW(decode<Shape>(bad), DecodeError);
}

// Brute-force model: a shape's members are the locations in rank order.
TEST(Shape, RandomizedSlicesOfSlicesMatchTheModel) {
  std::mt19937 rng(12345);
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::pair<std::string, std::size_t>> spec;
    const std::size_t dims = pick(1, 3);
    for (std::size_t d = 0; d < dims; ++d) spec.emplace_back("d" + std::to_string(d), pick(1, 5));
    Shape shape = Shape::of(spec);
    std::vector<std::size_t> model_locs = shape.locations();
    for (int step = 0; step < 3 && shape.num_dims() > 0; ++step) {
      const std::size_t d = pick(0, shape.num_dims() - 1);
      const std::string label = shape.labels()[d];
      const std::size_t size = shape.size(label);
      std::vector<std::size_t> kept;
      if (pick(0, 1) == 0) {
        const std::size_t index = pick(0, size - 1);
        const Shape next = shape.at(label, index);
        for (std::size_t r = 0; r < shape.len(); ++r) {
          if (shape.point(r).coords[d] == index) kept.push_back(model_locs[r]);
        }
        shape = next;
      } else {
        const std::size_t begin = pick(0, size - 1);
        const std::size_t end = pick(begin + 1, size);
        const std::size_t stride = pick(1, 3);
        const Shape next = shape.range(label, begin, end, stride);
        for (std::size_t r = 0; r < shape.len(); ++r) {
          const std::size_t c = shape.point(r).coords[d];
          if (c >= begin && c < end && (c - begin) % stride == 0) kept.push_back(model_locs[r]);
        }
        shape = next;
      }
      ASSERT_EQ(shape.locations(), kept) << "after slicing " << label;
      model_locs = kept;
      for (std::size_t r = 0; r < shape.len(); ++r) {
        ASSERT_EQ(shape.slice().rank_of_location(shape.location(r)), r);
        ASSERT_EQ(shape.rank_of(shape.point(r).coords), r);
      }
    }
  }
}

TEST(Shape, RandomizedSplitThenFlattenRoundTrips) {
  std::mt19937 rng(777);
  for (int iter = 0; iter < 500; ++iter) {
    const std::size_t a = 1 + rng() % 4;
    const std::size_t b = 1 + rng() % 4;
    const std::size_t g = 1 + rng() % 5;
    const Shape s = Shape::of({{"hosts", a * b}, {"gpus", g}});
    const Shape split = s.split("hosts", {{"dp", a}, {"pp", b}});
    ASSERT_EQ(split.locations(), s.locations());
    ASSERT_EQ(split.flatten("flat").locations(), s.locations());
    ASSERT_EQ(split.at("pp", b - 1).locations(), [&] {
      std::vector<std::size_t> out;
      for (std::size_t r = 0; r < s.len(); ++r) {
        if ((s.point(r)["hosts"] % b) == b - 1) out.push_back(s.location(r));
      }
      return out;
    }());
  }
}

}  // namespace
}  // namespace baton
