// Slices, shapes and points: locations and ranks, slicing, splitting and flattening, and the
// errors of each, checked against models of their own and over random shapes.
#include "baton/slice/slice.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "slice/slice.test.hpp"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace slice_test;  // NOLINT(google-build-using-namespace): this layer's test helpers

// Every coordinate vector in row-major order, by odometer, independent of the code under test.
std::vector<Sizes> all_coords(const Sizes& sizes) {
  std::vector<Sizes> out;
  Sizes c(sizes.size(), 0);
  for (;;) {
    out.push_back(c);
    std::size_t d = sizes.size();
    while (d > 0 && ++c[d - 1] == sizes[d - 1]) c[--d] = 0;
    if (d == 0) return out;
  }
}

// Brute-force locations in rank order.
Sizes model_locations(std::size_t offset, const Sizes& sizes, const Sizes& strides) {
  Sizes out;
  for (const Sizes& c : all_coords(sizes)) {
    std::size_t loc = offset;
    for (std::size_t d = 0; d < c.size(); ++d) loc += c[d] * strides[d];
    out.push_back(loc);
  }
  return out;
}

bool evenly_spaced(const Sizes& locs) {
  for (std::size_t i = 2; i < locs.size(); ++i) {
    if (locs[i] - locs[i - 1] != locs[1] - locs[0]) return false;
  }
  return locs.size() < 2 || locs[1] > locs[0];
}

Dims dims_of(const Shape& s) {
  Dims out;
  for (const auto& l : s.labels()) out.emplace_back(l, s.size(l));
  return out;
}

// --- Slice ----------------------------------------------------------------------------------

TEST(Slice, RowMajorLocationsAndRanks) {
  const Slice s = Slice::row_major({2, 3});
  EXPECT_EQ(s.offset(), 0u);
  EXPECT_EQ(s.sizes(), (Sizes{2, 3}));
  EXPECT_EQ(s.strides(), (Sizes{3, 1}));
  EXPECT_EQ(s.num_dims(), 2u);
  EXPECT_EQ(s.len(), 6u);
  EXPECT_THAT(s.locations(), ElementsAre(0, 1, 2, 3, 4, 5));
  const Sizes c = {1, 2};
  EXPECT_EQ(s.location(c), 5u);
  EXPECT_EQ(s.coordinates(4), (Sizes{1, 1}));
  EXPECT_EQ(s.location_of_rank(4), 4u);
  EXPECT_EQ(s.rank_of_location(5), 5u);
  EXPECT_EQ(s.rank_of_location(6), std::nullopt);
  EXPECT_EQ(Slice::row_major({2, 1, 3}).strides(), (Sizes{3, 3, 1}));
}

TEST(Slice, ZeroDimensionalSlicesHaveOneMemberAtTheOffset) {
  EXPECT_EQ(Slice().len(), 1u);
  EXPECT_THAT(Slice().locations(), ElementsAre(0));
  const Slice s(7, {}, {});
  EXPECT_EQ(s.num_dims(), 0u);
  EXPECT_EQ(s.len(), 1u);
  EXPECT_THAT(s.locations(), ElementsAre(7));
  EXPECT_EQ(s.location(Sizes{}), 7u);
  EXPECT_EQ(s.coordinates(7), Sizes{});
  EXPECT_EQ(s.rank_of_location(7), 0u);
  EXPECT_FALSE(s.contains(6));
  EXPECT_FALSE(s.contains(8));
  EXPECT_EQ(Slice::row_major({}), Slice());
}

TEST(Slice, StridedSliceRejectsLocationsInItsGaps) {
  const Slice s(1, {2, 2}, {8, 2});
  EXPECT_THAT(s.locations(), ElementsAre(1, 3, 9, 11));
  for (std::size_t loc : {0, 2, 4, 5, 8, 10, 12, 13, 19}) EXPECT_FALSE(s.contains(loc)) << loc;
  EXPECT_EQ(s.rank_of_location(9), 2u);
  EXPECT_EQ(s.coordinates(11), (Sizes{1, 1}));
}

TEST(Slice, ColumnMajorSlicesAreInvertible) {
  const Slice s(0, {2, 3}, {1, 2});
  EXPECT_THAT(s.locations(), ElementsAre(0, 2, 4, 1, 3, 5));
  for (std::size_t r = 0; r < s.len(); ++r) EXPECT_EQ(s.rank_of_location(s.location_of_rank(r)), r);
  EXPECT_EQ(s.coordinates(3), (Sizes{1, 1}));
}

TEST(Slice, EqualityIgnoresTheStrideOfSizeOneDimensions) {
  EXPECT_EQ(Slice(5, {1, 3}, {0, 1}), Slice(5, {1, 3}, {100, 1}));
  EXPECT_NE(Slice(5, {2, 3}, {3, 1}), Slice(5, {2, 3}, {4, 1}));
  EXPECT_NE(Slice(5, {1, 3}, {0, 1}), Slice(5, {3}, {1}));
  EXPECT_NE(Slice(5, {3}, {1}), Slice(4, {3}, {1}));
}

TEST(Slice, ConstructorErrorsSayWhatIsWrong) {
  EXPECT_EQ(error_of([] {
              Slice(0, {2}, {1, 1});
            }),
            "a slice needs one stride per size: got 1 sizes and 2 strides");
  EXPECT_EQ(error_of([] {
              Slice(0, {2, 0}, {1, 1});
            }),
            "dimension sizes must be at least 1: [2, 0]");
  EXPECT_EQ(error_of([] { Slice(0, Sizes(65, 1), Sizes(65, 1)); }),
            "a slice has at most 64 dimensions, got 65");
  EXPECT_EQ(error_of([] { Slice(0, Sizes(64, 1), Sizes(64, 1)); }), "no error");
  const std::size_t big = std::size_t{1} << 32;
  EXPECT_EQ(error_of([&] {
              Slice(0, {big, big}, {big, 1});
            }),
            "Slice(offset=0, sizes=[4294967296, 4294967296], strides=[4294967296, 1]) overflows: "
            "its member count or last location exceeds 18446744073709551615");
  EXPECT_THAT(error_of([] { Slice(0, {3}, {(kMax / 2) + 1}); }), HasSubstr("overflows"));
  EXPECT_THAT(error_of([] { Slice(kMax, {2}, {1}); }), HasSubstr("overflows"));
  EXPECT_EQ(error_of([] { Slice(kMax - 1, {2}, {1}); }), "no error");
  EXPECT_EQ(error_of([] {
              Slice(0, {3, 2}, {2, 3});
            }),
            "Slice(offset=0, sizes=[3, 2], strides=[2, 3]) has interleaved dimensions: the stride "
            "3 of dimension 1 must exceed 4, the reach of the smaller strides, so that each "
            "location has one coordinate");
  EXPECT_THAT(error_of([] {
                Slice(0, {2, 2}, {1, 1});
              }),
              HasSubstr("the stride 1 of dimension 1 must exceed 1"));
  EXPECT_THAT(error_of([] { Slice(0, {2}, {0}); }),
              HasSubstr("the stride 0 of dimension 0 must exceed 0"));
  EXPECT_EQ(error_of([] { Slice(0, {1, 2}, {0, 1}); }), "no error");
  EXPECT_EQ(error_of([] {
              Slice::row_major({2, 0});
            }),
            "dimension sizes must be at least 1: [2, 0]");
  EXPECT_EQ(error_of([&] {
              Slice::row_major({big, big, 2});
            }),
            "row-major sizes [4294967296, 4294967296, 2] have more than 18446744073709551615 "
            "members");
}

TEST(Slice, AccessErrorsSayWhatIsWrong) {
  const Slice s = Slice::row_major({2, 3});
  EXPECT_EQ(error_of([&] { s.location(Sizes{1}); }),
            "a slice of 2 dimensions needs 2 coordinates, got 1");
  EXPECT_EQ(error_of([&] {
              s.location(Sizes{1, 3});
            }),
            "coordinate 3 out of bounds for dimension 1 (size 3)");
  EXPECT_EQ(error_of([&] { s.location_of_rank(6); }),
            "rank 6 out of bounds for Slice(offset=0, sizes=[2, 3], strides=[3, 1]) (6 members)");
  EXPECT_EQ(error_of([&] { s.coordinates(6); }),
            "location 6 is not in Slice(offset=0, sizes=[2, 3], strides=[3, 1])");
  EXPECT_EQ(error_of([] { Slice(4, {2}, {2}).coordinates(5); }),
            "location 5 is not in Slice(offset=4, sizes=[2], strides=[2])");
  EXPECT_EQ(error_of([] { Slice(4, {2}, {2}).coordinates(3); }),
            "location 3 is not in Slice(offset=4, sizes=[2], strides=[2])");
}

// Random (offset, sizes, strides), half of them built to nest: every accepted slice must map
// ranks to locations and back exactly as brute force does, and no slice that maps two
// coordinates to one location may be accepted.
TEST(Slice, RandomSlicesAreExactlyInvertibleOrRejected) {
  Rng rng(20240611);
  int accepted = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const std::size_t dims = rng.pick(0, 3);
    const std::size_t offset = rng.pick(0, 5);
    Sizes sizes(dims);
    Sizes strides(dims);
    for (auto& s : sizes) s = rng.pick(1, 4);
    const bool nested = iter % 2 == 0;
    if (nested) {
      Sizes order(dims);
      for (std::size_t d = 0; d < dims; ++d) order[d] = d;
      std::shuffle(order.begin(), order.end(), rng.gen);
      std::size_t reach = 0;
      for (std::size_t d : order) {
        strides[d] = reach + 1 + rng.pick(0, 3);
        reach += (sizes[d] - 1) * strides[d];
      }
    } else {
      for (auto& s : strides) s = rng.pick(0, 10);
    }
    const Sizes model = model_locations(offset, sizes, strides);
    const bool injective = std::set<std::size_t>(model.begin(), model.end()).size() == model.size();
    std::optional<Slice> slice;
    try {
      slice.emplace(offset, sizes, strides);
    } catch (const SliceError&) {
    }
    ASSERT_TRUE(slice || !nested) << "nested slice rejected at iteration " << iter;
    ASSERT_TRUE(!slice || injective) << slice->to_string() << " is not one-to-one";
    if (!slice) continue;
    ++accepted;
    ASSERT_EQ(slice->locations(), model);
    const std::size_t last = *std::max_element(model.begin(), model.end());
    for (std::size_t loc = 0; loc <= last + 3; ++loc) {
      const auto it = std::find(model.begin(), model.end(), loc);
      const auto rank = slice->rank_of_location(loc);
      if (it == model.end()) {
        ASSERT_EQ(rank, std::nullopt) << slice->to_string() << " location " << loc;
        ASSERT_FALSE(slice->contains(loc));
        continue;
      }
      ASSERT_EQ(rank, static_cast<std::size_t>(it - model.begin()))
          << slice->to_string() << " location " << loc;
      ASSERT_TRUE(slice->contains(loc));
      const Sizes coords = slice->coordinates(loc);
      ASSERT_EQ(coords, all_coords(sizes)[*rank]);
      ASSERT_EQ(slice->location(coords), loc);
    }
  }
  EXPECT_GT(accepted, 1200);  // the property must not hold vacuously
}

// --- Point ----------------------------------------------------------------------------------

TEST(Point, LooksUpCoordinatesByName) {
  const Point p{{"hosts", "gpus"}, {1, 3}, 11};
  EXPECT_EQ(p["hosts"], 1u);
  EXPECT_EQ(p["gpus"], 3u);
  EXPECT_EQ(p.to_string(), "{hosts: 1, gpus: 3}");
  EXPECT_EQ(error_of([&] { (void)p["zone"]; }), "no dimension 'zone' in point {hosts: 1, gpus: 3}");
  EXPECT_EQ(Point{}.to_string(), "{}");
  EXPECT_NE(p, (Point{{"hosts", "gpus"}, {1, 3}, 10}));
}

// --- Shape ----------------------------------------------------------------------------------

TEST(Shape, DefaultShapeHasOneMember) {
  const Shape s;
  EXPECT_EQ(s.num_dims(), 0u);
  EXPECT_EQ(s.len(), 1u);
  EXPECT_EQ(s.to_string(), "{}");
  EXPECT_EQ(s.point(0), (Point{{}, {}, 0}));
  EXPECT_EQ(s.location(0), 0u);
  EXPECT_THAT(s.locations(), ElementsAre(0));
  EXPECT_EQ(s.points().size(), 1u);
  EXPECT_EQ(s.rank_of(Sizes{}), 0u);
  EXPECT_EQ(s, Shape::of({}));
  EXPECT_EQ(s.flatten("all").to_string(), "{all: 1}");
  EXPECT_THAT(s.flatten("all").locations(), ElementsAre(0));
}

// Every shape of up to 3 dimensions with sizes 1..4, both row-major and embedded with an offset
// and steps in a larger base.
TEST(Shape, ExhaustiveRankCoordinateRoundTrips) {
  int shapes = 0;
  for (std::size_t dims = 0; dims <= 3; ++dims) {
    Sizes sizes(dims, 1);
    for (;;) {
      Dims spec;
      Dims wide;
      for (std::size_t d = 0; d < dims; ++d) {
        spec.emplace_back("d" + std::to_string(d), sizes[d]);
        wide.emplace_back("d" + std::to_string(d), 2 * sizes[d] + 1);
      }
      Shape embedded_base = Shape::of(wide);
      for (std::size_t d = 0; d < dims; ++d) {
        embedded_base = embedded_base.range("d" + std::to_string(d), 1, 2 * sizes[d] + 1, 2);
      }
      const Shape row_major = Shape::of(spec);
      const Shape embedded = embedded_base;
      ASSERT_EQ(embedded.to_string(), row_major.to_string());
      for (const Shape* which : {&row_major, &embedded}) {
        const Shape& shape = *which;
        ++shapes;
        const std::vector<Sizes> coords = all_coords(sizes);
        ASSERT_EQ(shape.len(), coords.size());
        const std::vector<Point> points = shape.points();
        ASSERT_EQ(points.size(), coords.size());
        for (std::size_t r = 0; r < shape.len(); ++r) {
          const Point p = shape.point(r);
          ASSERT_EQ(p, points[r]);
          ASSERT_EQ(p.rank, r);
          ASSERT_EQ(p.coords, coords[r]);
          ASSERT_EQ(p.labels, shape.labels());
          for (std::size_t d = 0; d < dims; ++d) ASSERT_EQ(p[shape.labels()[d]], coords[r][d]);
          ASSERT_EQ(shape.rank_of(p.coords), r);
          const std::size_t loc = shape.location(r);
          ASSERT_EQ(loc, shape.slice().location(p.coords));
          ASSERT_EQ(shape.slice().coordinates(loc), p.coords);
          ASSERT_EQ(shape.slice().rank_of_location(loc), r);
          ASSERT_TRUE(which != &row_major || loc == r) << loc << " for rank " << r;
        }
      }
      std::size_t d = dims;
      while (d > 0 && ++sizes[d - 1] > 4) sizes[--d] = 1;
      if (d == 0) break;
    }
  }
  EXPECT_EQ(shapes, 2 * (1 + 4 + 16 + 64));
}

TEST(Shape, AtDropsTheDimensionAndRangeKeepsIt) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}});
  EXPECT_EQ(s.to_string(), "{hosts: 2, gpus: 8}");
  EXPECT_EQ(s.size("gpus"), 8u);
  EXPECT_TRUE(s.has("hosts"));
  EXPECT_FALSE(s.has("host"));
  const Shape host1 = s.at("hosts", 1);
  EXPECT_EQ(host1.to_string(), "{gpus: 8}");
  EXPECT_THAT(host1.locations(), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(host1.range("gpus", 0, 4).locations(), ElementsAre(8, 9, 10, 11));
  EXPECT_THAT(s.at("gpus", 3).locations(), ElementsAre(3, 11));
  EXPECT_THAT(host1.at("gpus", 2).locations(), ElementsAre(10));
  EXPECT_EQ(host1.at("gpus", 2).num_dims(), 0u);
  const Shape half = s.range("gpus", 0, 4);
  EXPECT_EQ(half.to_string(), "{hosts: 2, gpus: 4}");
  EXPECT_THAT(half.locations(), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  const Shape odd = s.range("gpus", 1, 8, 2);
  EXPECT_EQ(odd.to_string(), "{hosts: 2, gpus: 4}");
  EXPECT_THAT(odd.locations(), ElementsAre(1, 3, 5, 7, 9, 11, 13, 15));
  const Point p = odd.point(5);
  EXPECT_EQ(p.to_string(), "{hosts: 1, gpus: 1}");
  EXPECT_EQ(p["hosts"], 1u);
  EXPECT_EQ(odd.location(5), 11u);
  EXPECT_EQ(s.range("gpus", 1, 7, 3).size("gpus"), 2u);
  EXPECT_EQ(s.range("gpus", 1, 8, 3).size("gpus"), 3u);
}

TEST(Shape, RangeOfOneMemberIgnoresTheStep) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}});
  EXPECT_EQ(s.range("gpus", 2, 3, 5), s.range("gpus", 2, 3));
  EXPECT_THAT(s.range("gpus", 2, 3, kMax).locations(), ElementsAre(2, 10));
  EXPECT_THAT(s.range("gpus", 2, 8, kMax).locations(), ElementsAre(2, 10));
}

TEST(Shape, ErrorsSayWhatIsWrong) {
  const Shape s = Shape::of({{"hosts", 2}, {"gpus", 8}});
  const std::string no_gpu = "no dimension 'gpu' in shape {hosts: 2, gpus: 8}";
  EXPECT_EQ(error_of([&] { s.at("gpu", 0); }), no_gpu);
  EXPECT_EQ(error_of([&] { s.range("gpu", 0, 1); }), no_gpu);
  EXPECT_EQ(error_of([&] { s.size("gpu"); }), no_gpu);
  EXPECT_EQ(error_of([&] { s.rename("gpu", "x"); }), no_gpu);
  EXPECT_EQ(error_of([&] { s.split("gpu", {{"x", 8}}); }), no_gpu);
  EXPECT_EQ(error_of([&] { s.range("gpus", 4, 9); }),
            "range 4..9 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.range("gpus", 8, 8); }),
            "range 8..8 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.range("gpus", 9, 4); }),
            "range 9..4 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.range("gpus", 3, 3); }),
            "empty range 3..3 for 'gpus' (size 8): end must be greater than begin");
  EXPECT_EQ(error_of([&] { s.range("gpus", 5, 2); }),
            "empty range 5..2 for 'gpus' (size 8): end must be greater than begin");
  EXPECT_EQ(error_of([&] { s.range("gpus", 0, 8, 0); }),
            "range step for 'gpus' must be at least 1");
  EXPECT_EQ(error_of([&] { s.at("gpus", 8); }), "index 8 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.rank_of(Sizes{1, 8}); }), "index 8 out of bounds for 'gpus' (size 8)");
  EXPECT_EQ(error_of([&] { s.rank_of(Sizes{1}); }),
            "shape {hosts: 2, gpus: 8} needs 2 coordinates, got 1");
  EXPECT_EQ(error_of([&] { s.point(16); }),
            "rank 16 out of bounds for shape {hosts: 2, gpus: 8} (16 members)");
  EXPECT_EQ(error_of([&] { s.location(16); }),
            "rank 16 out of bounds for shape {hosts: 2, gpus: 8} (16 members)");
  EXPECT_EQ(error_of([&] { (void)s.point(3)["zone"]; }),
            "no dimension 'zone' in point {hosts: 0, gpus: 3}");
  EXPECT_EQ(error_of([&] { s.rename("hosts", "gpus"); }),
            "cannot rename 'hosts' to 'gpus': shape {hosts: 2, gpus: 8} already has a dimension "
            "'gpus'");
  EXPECT_EQ(error_of([&] { s.rename("hosts", "a-b"); }),
            "invalid dimension name 'a-b': use 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(error_of([&] {
              s.split("hosts", {{"dp", 3}});
            }),
            "cannot split 'hosts' (size 2) into {dp: 3}: the part sizes multiply to more than 2");
  EXPECT_EQ(error_of([&] {
              s.split("gpus", {{"a", 2}, {"b", 2}});
            }),
            "cannot split 'gpus' (size 8) into {a: 2, b: 2}: the part sizes multiply to 4, not 8");
  EXPECT_EQ(error_of([&] {
              s.split("gpus", {{"a", 0}, {"b", 2}});
            }),
            "cannot split 'gpus' (size 8) into {a: 0, b: 2}: every part needs at least 1 member");
  EXPECT_EQ(error_of([&] {
              s.split("gpus", {{"a", kMax}, {"b", kMax}});
            }),
            "cannot split 'gpus' (size 8) into {a: 18446744073709551615, b: "
            "18446744073709551615}: the part sizes multiply to more than 8");
  EXPECT_EQ(error_of([&] { s.split("gpus", {}); }), "split of 'gpus' needs at least one part");
  EXPECT_EQ(error_of([&] {
              s.split("gpus", {{"hosts", 2}, {"b", 4}});
            }),
            "dimension name 'hosts' appears twice; give each dimension a unique name");
  EXPECT_EQ(error_of([&] { s.range("gpus", 0, 8, 3).flatten("all"); }),
            "cannot flatten {hosts: 2, gpus: 3} into one dimension: its members are not evenly "
            "spaced (Slice(offset=0, sizes=[2, 3], strides=[8, 3])); flatten before slicing with "
            "a step, or flatten each part separately");
  EXPECT_EQ(error_of([&] { s.flatten(""); }),
            "invalid dimension name '': use 1-64 characters of [A-Za-z0-9_]");
}

TEST(Shape, ConstructorErrorsSayWhatIsWrong) {
  EXPECT_EQ(error_of([] {
              Shape({"a"}, Slice::row_major({2, 2}));
            }),
            "a shape needs one label per dimension: got 1 labels for 2 dimensions");
  EXPECT_EQ(error_of([] {
              Shape::of({{"bad name", 2}});
            }),
            "invalid dimension name 'bad name': use 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(error_of([] {
              Shape::of({{"", 2}});
            }),
            "invalid dimension name '': use 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(
      error_of([] {
        Shape::of({{std::string(65, 'x'), 2}});
      }),
      "invalid dimension name '" + std::string(65, 'x') + "': use 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(error_of([] { Shape::of({{std::string(64, 'x'), 2}, {"Az_09", 1}}); }), "no error");
  EXPECT_EQ(error_of([] {
              Shape::of({{"a", 2}, {"b", 3}, {"a", 4}});
            }),
            "dimension name 'a' appears twice; give each dimension a unique name");
  EXPECT_EQ(error_of([] {
              Shape::of({{"a", 2}, {"gpus", 0}});
            }),
            "dimension 'gpus' has size 0; every dimension needs at least 1 member");
}

TEST(Shape, SplitFlattenAndRename) {
  const Shape s = Shape::of({{"hosts", 8}, {"gpus", 4}});
  const Shape split = s.split("hosts", {{"dp", 2}, {"pp", 4}});
  EXPECT_EQ(split.to_string(), "{dp: 2, pp: 4, gpus: 4}");
  EXPECT_EQ(split.slice().strides(), (Sizes{16, 4, 1}));
  EXPECT_EQ(split.locations(), s.locations());
  EXPECT_EQ(split.point(13).to_string(), "{dp: 0, pp: 3, gpus: 1}");
  EXPECT_EQ(split.flatten("all"), Shape::of({{"all", 32}}));
  EXPECT_EQ(s.split("gpus", {{"g", 4}}), s.rename("gpus", "g"));
  EXPECT_EQ(s.split("gpus", {{"one", 1}, {"g", 4}}).to_string(), "{hosts: 8, one: 1, g: 4}");
  EXPECT_EQ(s.at("gpus", 2).flatten("h").locations(), s.at("gpus", 2).locations());
  EXPECT_EQ(s.at("gpus", 2).flatten("h").slice(), Slice(2, {8}, {4}));
  const Shape renamed = s.rename("gpus", "devices");
  EXPECT_EQ(renamed.to_string(), "{hosts: 8, devices: 4}");
  EXPECT_EQ(renamed.slice(), s.slice());
  EXPECT_FALSE(renamed.has("gpus"));
  EXPECT_EQ(s.rename("gpus", "gpus"), s);
  // Dimensions of size 1 do not get in the way of flattening.
  const Shape thin = Shape::of({{"a", 1}, {"b", 3}, {"c", 1}}).range("b", 0, 3, 2);
  EXPECT_EQ(thin.flatten("f").slice(), Slice(0, {2}, {2}));
}

TEST(Shape, SplitOfAStridedMiddleDimensionKeepsEveryLocation) {
  const Shape s = Shape::of({{"a", 2}, {"hosts", 12}, {"g", 3}}).range("hosts", 1, 12, 2);
  ASSERT_EQ(s.size("hosts"), 6u);
  const Shape split = s.split("hosts", {{"x", 2}, {"y", 3}});
  EXPECT_EQ(split.to_string(), "{a: 2, x: 2, y: 3, g: 3}");
  EXPECT_EQ(split.locations(), s.locations());
  for (const Point& p : split.points()) {
    const Sizes original = {p["a"], p["x"] * 3 + p["y"], p["g"]};
    EXPECT_EQ(s.rank_of(original), p.rank) << p.to_string();
  }
}

// Chains of at and range over random shapes.
struct Op {
  bool at;
  std::string label;
  std::size_t begin, end, step;  // at uses begin as the index
};

Op random_op(Rng& rng, const Shape& shape) {
  const std::string label = shape.labels()[rng.pick(0, shape.num_dims() - 1)];
  const std::size_t size = shape.size(label);
  Op op{rng.pick(0, 2) == 0, label, rng.pick(0, size - 1), 0, 1};
  op.end = rng.pick(op.begin + 1, size);
  op.step = rng.pick(1, 3);
  return op;
}

Shape apply(const Shape& s, const Op& op) {
  return op.at ? s.at(op.label, op.begin) : s.range(op.label, op.begin, op.end, op.step);
}

// What each base dimension became: a fixed index, or every step-th of count from begin.
struct DimModel {
  bool fixed = false;
  std::size_t begin = 0, step = 1, count = 0;
};

// A chain of at/range equals one at or range per base dimension, and both equal the slice
// computed from the base strides.
TEST(Shape, SliceOfASliceEqualsTheDirectlyComposedSlice) {
  Rng rng(4242);
  for (int iter = 0; iter < 2000; ++iter) {
    const Shape base = random_shape(rng, 6);
    std::vector<DimModel> model(base.num_dims());
    for (std::size_t d = 0; d < base.num_dims(); ++d) model[d].count = base.slice().sizes()[d];
    Shape shape = base;
    const std::size_t steps = rng.pick(1, 4);
    for (std::size_t i = 0; i < steps && shape.num_dims() > 0; ++i) {
      const Op op = random_op(rng, shape);
      const std::size_t b = std::stoul(op.label.substr(1));
      DimModel& m = model[b];
      if (op.at) {
        m.fixed = true;
        m.begin += op.begin * m.step;
      } else {
        m.begin += op.begin * m.step;
        m.step *= op.step;
        m.count = (op.end - op.begin + op.step - 1) / op.step;
      }
      shape = apply(shape, op);
    }
    std::size_t offset = 0;
    std::vector<std::string> labels;
    Sizes sizes;
    Sizes strides;
    Shape direct = base;
    for (std::size_t d = 0; d < base.num_dims(); ++d) {
      const std::size_t base_stride = base.slice().strides()[d];
      const std::string& label = base.labels()[d];
      const DimModel& m = model[d];
      offset += m.begin * base_stride;
      if (m.fixed) {
        direct = direct.at(label, m.begin);
        continue;
      }
      labels.push_back(label);
      sizes.push_back(m.count);
      strides.push_back(m.step * base_stride);
      direct = direct.range(label, m.begin, m.begin + (m.count - 1) * m.step + 1, m.step);
    }
    const Shape expected(labels, Slice(offset, sizes, strides));
    ASSERT_EQ(shape, expected) << "iteration " << iter;
    ASSERT_EQ(shape, direct) << "iteration " << iter;
    ASSERT_EQ(shape.locations(), model_locations(offset, sizes, strides));
  }
}

// Each at/range keeps exactly the parent's members that brute force selects, in rank order.
TEST(Shape, RandomizedAtAndRangeSelectExactlyTheModelsMembers) {
  Rng rng(12345);
  for (int iter = 0; iter < 2000; ++iter) {
    Shape shape = random_shape(rng, 5);
    for (int step = 0; step < 3 && shape.num_dims() > 0; ++step) {
      const Op op = random_op(rng, shape);
      const std::size_t d = static_cast<std::size_t>(
          std::find(shape.labels().begin(), shape.labels().end(), op.label) -
          shape.labels().begin());
      Sizes kept;
      for (const Point& p : shape.points()) {
        const std::size_t c = p.coords[d];
        const bool in =
            op.at ? c == op.begin : c >= op.begin && c < op.end && (c - op.begin) % op.step == 0;
        if (in) kept.push_back(shape.location(p.rank));
      }
      const Shape next = apply(shape, op);
      ASSERT_EQ(next.locations(), kept) << "iteration " << iter << " on " << op.label;
      ASSERT_EQ(next.num_dims(), shape.num_dims() - (op.at ? 1 : 0));
      for (std::size_t r = 0; r < next.len(); ++r) {
        ASSERT_EQ(next.slice().rank_of_location(next.location(r)), r);
        ASSERT_EQ(next.rank_of(next.point(r).coords), r);
        ASSERT_TRUE(shape.slice().contains(next.location(r)));
      }
      shape = next;
    }
  }
}

// Split one dimension of a random (possibly strided) shape into random factors: locations and
// rank order stay; flatten agrees with brute force and with flattening the unsplit shape; and
// splitting a flattened shape back by its old sizes recovers it.
TEST(Shape, RandomizedSplitAndFlattenRoundTrip) {
  Rng rng(777);
  int flattened = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    Shape s = random_shape(rng, 8);
    for (std::size_t i = rng.pick(0, 2); i > 0 && s.num_dims() > 1; --i)
      s = apply(s, random_op(rng, s));
    const std::size_t d = rng.pick(0, s.num_dims() - 1);
    const std::string label = s.labels()[d];
    Dims parts;
    std::size_t left = s.size(label);
    for (std::size_t k = rng.pick(1, 3); k > 1; --k) {
      Sizes divisors;
      for (std::size_t f = 1; f <= left; ++f) {
        if (left % f == 0) divisors.push_back(f);
      }
      const std::size_t f = divisors[rng.pick(0, divisors.size() - 1)];
      parts.emplace_back("p" + std::to_string(parts.size()), f);
      left /= f;
    }
    parts.emplace_back("p" + std::to_string(parts.size()), left);
    const Shape split = s.split(label, parts);
    ASSERT_EQ(split.len(), s.len());
    ASSERT_EQ(split.locations(), s.locations())
        << s.to_string() << " split into " << split.to_string();
    for (const Point& p : split.points()) {
      Sizes original;
      for (std::size_t i = 0; i < d; ++i) original.push_back(p.coords[i]);
      std::size_t c = 0;
      for (std::size_t i = 0; i < parts.size(); ++i) c = c * parts[i].second + p.coords[d + i];
      original.push_back(c);
      for (std::size_t i = d + 1; i < s.num_dims(); ++i) {
        original.push_back(p.coords[i + parts.size() - 1]);
      }
      ASSERT_EQ(s.rank_of(original), p.rank);
    }
    const Sizes locs = s.locations();
    const std::string flat_error = error_of([&] { s.flatten("flat"); });
    ASSERT_EQ(error_of([&] { split.flatten("flat"); }) == "no error", evenly_spaced(locs));
    ASSERT_EQ(flat_error == "no error", evenly_spaced(locs)) << flat_error;
    if (!evenly_spaced(locs)) continue;
    ++flattened;
    const Shape flat = s.flatten("flat");
    ASSERT_EQ(split.flatten("flat"), flat);
    ASSERT_EQ(flat.locations(), locs);
    ASSERT_EQ(flat.flatten("flat"), flat);
    ASSERT_EQ(flat.split("flat", dims_of(s)), s);
    ASSERT_EQ(flat.split("flat", dims_of(split)), split);
  }
  EXPECT_GT(flattened, 500);  // the round trip must not hold vacuously
}

}  // namespace
}  // namespace baton
