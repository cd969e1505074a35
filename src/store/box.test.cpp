// The tensor store's geometry: boxes met and subtracted, torch's chunking and DTensor placements,
// and resharding a tensor between 1, 2 and 4 shards in rows, columns and 2-D tiles, each
// element checked against the whole tensor.

#include "baton/store/box.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace baton::store {
namespace {

using ::testing::HasSubstr;

Box box(std::vector<std::int64_t> offsets, std::vector<std::int64_t> sizes) {
  return {std::move(offsets), std::move(sizes)};
}

TEST(Box, IntersectContainsAndText) {
  const Box a = box({0, 0}, {4, 6});
  const Box b = box({2, 3}, {4, 6});
  EXPECT_EQ(intersect(a, b), box({2, 3}, {2, 3}));
  EXPECT_EQ(intersect(a, box({4, 0}, {2, 6})), std::nullopt);  // they only touch
  EXPECT_EQ(intersect(a, box({0}, {4})), std::nullopt);        // another rank
  EXPECT_TRUE(contains(a, box({1, 1}, {3, 5})));
  EXPECT_FALSE(contains(a, box({1, 1}, {4, 5})));
  EXPECT_EQ(b.to_string(), "[2:6, 3:9]");
  EXPECT_EQ(a.elements(), 24);
  EXPECT_TRUE(box({0, 0}, {3, 0}).empty());
  EXPECT_EQ(Box::whole({}).elements(), 1);  // a scalar
}

TEST(Box, UncoveredNamesWhatTheShardsLeaveOut) {
  const Box whole = Box::whole({4, 6});
  EXPECT_TRUE(uncovered(whole, {box({0, 0}, {2, 6}), box({2, 0}, {2, 6})}).empty());
  EXPECT_EQ(uncovered(whole, {box({0, 0}, {2, 6})}), std::vector<Box>{box({2, 0}, {2, 6})});
  // Three tiles of four: the fourth is what is missing.
  const std::vector<Box> tiles = {box({0, 0}, {2, 3}), box({0, 3}, {2, 3}), box({2, 0}, {2, 3})};
  EXPECT_EQ(uncovered(whole, tiles), std::vector<Box>{box({2, 3}, {2, 3})});
  // Overlapping shards cover as well as disjoint ones.
  EXPECT_TRUE(uncovered(whole, {box({0, 0}, {3, 6}), box({1, 0}, {3, 6})}).empty());
  // What is left is disjoint and adds up.
  const auto left = uncovered(whole, {box({1, 2}, {2, 2})});
  std::int64_t n = 0;
  for (const Box& b : left) n += b.elements();
  EXPECT_EQ(n, 24 - 4);
  for (std::size_t i = 0; i < left.size(); ++i) {
    for (std::size_t j = i + 1; j < left.size(); ++j) {
      EXPECT_EQ(intersect(left[i], left[j]), std::nullopt);
    }
  }
}

TEST(Box, ChunksSplitAsTorchChunkDoes) {
  // torch.chunk(7 rows, 4): 2, 2, 2, 1; torch.chunk(5, 4): 2, 2, 1 and an empty fourth.
  const Box seven = Box::whole({7, 3});
  std::vector<std::int64_t> got;
  for (std::size_t i = 0; i < 4; ++i) got.push_back(chunk(seven, 0, i, 4).sizes[0]);
  EXPECT_EQ(got, (std::vector<std::int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(chunk(seven, 0, 3, 4).offsets[0], 6);
  const Box five = Box::whole({5});
  EXPECT_EQ(chunk(five, 0, 2, 4), box({4}, {1}));
  EXPECT_TRUE(chunk(five, 0, 3, 4).empty());
  EXPECT_THROW((void)chunk(five, 1, 0, 2), std::invalid_argument);
  EXPECT_THROW((void)chunk(five, 0, 2, 2), std::invalid_argument);
}

TEST(Box, PlacementsPutEachRanksShardWhereDTensorDoes) {
  const std::vector<std::int64_t> shape = {8, 6};
  using P = Placement;
  // A 2x2 mesh: rows over the first mesh dimension, columns over the second.
  EXPECT_EQ(placement_box(shape, {P::shard(0), P::shard(1)}, {2, 2}, {1, 0}), box({4, 0}, {4, 3}));
  // Both mesh dimensions shard the rows: the second splits the first's chunk again.
  EXPECT_EQ(placement_box(shape, {P::shard(0), P::shard(0)}, {2, 2}, {1, 1}), box({6, 0}, {2, 6}));
  // Replicated over the first, sharded over the second.
  EXPECT_EQ(placement_box(shape, {P::replicate(), P::shard(1)}, {2, 3}, {1, 2}),
            box({0, 4}, {8, 2}));
  try {
    (void)placement_box(shape, {P::shard(2)}, {2}, {0});
    ADD_FAILURE() << "a shard of a dimension the tensor does not have";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("Shard(2) of a tensor of 2 dimensions"));
  }
  EXPECT_THROW((void)placement_box(shape, {P::shard(0)}, {2}, {2}), std::invalid_argument);
  EXPECT_THROW((void)placement_box(shape, {P::shard(0)}, {2, 2}, {0, 0}), std::invalid_argument);
}

/// A layout of a tensor over shards: the box of each.
using Layout = std::vector<Box>;

Layout rows(const std::vector<std::int64_t>& shape, std::size_t n) {
  Layout out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(chunk(Box::whole(shape), 0, i, n));
  return out;
}
Layout columns(const std::vector<std::int64_t>& shape, std::size_t n) {
  Layout out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(chunk(Box::whole(shape), 1, i, n));
  return out;
}
Layout tiles(const std::vector<std::int64_t>& shape) {  // 2x2
  Layout out;
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t c = 0; c < 2; ++c) {
      out.push_back(
          placement_box(shape, {Placement::shard(0), Placement::shard(1)}, {2, 2}, {r, c}));
    }
  }
  return out;
}

/// The value of the element at (i, j) of the whole tensor.
template <class T>
T value_at(std::int64_t i, std::int64_t j) {
  return static_cast<T>(i * 1000 + j + 1);
}

/// Each shard's elements, laid out row-major on their own, as a writer holds them.
template <class T>
std::vector<std::vector<T>> shards_of(const Layout& layout) {
  std::vector<std::vector<T>> out;
  for (const Box& b : layout) {
    std::vector<T> data;
    for (std::int64_t i = 0; i < b.sizes[0]; ++i) {
      for (std::int64_t j = 0; j < b.sizes[1]; ++j) {
        data.push_back(value_at<T>(b.offsets[0] + i, b.offsets[1] + j));
      }
    }
    out.push_back(std::move(data));
  }
  return out;
}

/// Every reader's box of `to`, assembled from the shards of `from` that meet it, each element
/// checked against the whole tensor.
template <class T>
void reshard(const std::vector<std::int64_t>& shape, const Layout& from, const Layout& to,
             const std::string& what) {
  const auto held = shards_of<T>(from);
  for (const Box& want : to) {
    std::vector<T> mine(static_cast<std::size_t>(want.elements()), T{});
    std::vector<Box> got;
    for (std::size_t s = 0; s < from.size(); ++s) {
      const auto part = intersect(from[s], want);
      if (!part) continue;
      copy_region(held[s].data(), from[s], mine.data(), want, *part, sizeof(T));
      got.push_back(*part);
    }
    EXPECT_TRUE(uncovered(want, got).empty()) << what << ": " << want.to_string();
    for (std::int64_t i = 0; i < want.sizes[0]; ++i) {
      for (std::int64_t j = 0; j < want.sizes[1]; ++j) {
        const T expected = value_at<T>(want.offsets[0] + i, want.offsets[1] + j);
        ASSERT_EQ(mine[static_cast<std::size_t>(i * want.sizes[1] + j)], expected)
            << what << ": element (" << want.offsets[0] + i << ", " << want.offsets[1] + j
            << ") of " << want.to_string();
      }
    }
  }
  (void)shape;
}

TEST(Reshard, BetweenOneTwoAndFourShardsInRowsColumnsAndTilesEveryElementArrives) {
  // 7 x 10: rows and columns that do not split evenly, so the last shards are shorter.
  const std::vector<std::int64_t> shape = {7, 10};
  const std::vector<std::pair<std::string, Layout>> layouts = {
      {"whole", rows(shape, 1)},
      {"2 row shards", rows(shape, 2)},
      {"4 row shards", rows(shape, 4)},
      {"2 column shards", columns(shape, 2)},
      {"4 column shards", columns(shape, 4)},
      {"2x2 tiles", tiles(shape)}};
  for (const auto& [from_name, from] : layouts) {
    for (const auto& [to_name, to] : layouts) {
      reshard<float>(shape, from, to, from_name + " -> " + to_name);
      reshard<double>(shape, from, to, from_name + " -> " + to_name);
      reshard<std::uint16_t>(shape, from, to, from_name + " -> " + to_name);  // as bf16 is
    }
  }
  // A reader's own box, not a shard of any layout: a block in the middle.
  reshard<float>(shape, tiles(shape), {box({2, 3}, {4, 5})}, "tiles -> a middle block");
}

TEST(Reshard, ShardsPastTheEndAreEmptyAndCopyNothing) {
  const std::vector<std::int64_t> shape = {3, 4};
  const Layout four = rows(shape, 4);  // 1, 1, 1 and an empty fourth
  EXPECT_TRUE(four[3].empty());
  reshard<float>(shape, four, rows(shape, 1), "4 rows (one empty) -> whole");
  reshard<float>(shape, rows(shape, 1), four, "whole -> 4 rows (one empty)");
}

TEST(Reshard, ThreeDimensionsAndWholeRunsCopyAtOnce) {
  // A 3-D tensor whose last two dimensions are whole in every shard: one copy per shard.
  const std::vector<std::int64_t> shape = {4, 3, 5};
  std::vector<float> all(60);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i);
  const Box whole = Box::whole(shape);
  for (std::size_t s = 0; s < 2; ++s) {
    const Box part = chunk(whole, 0, s, 2);
    std::vector<float> mine(static_cast<std::size_t>(part.elements()));
    copy_region(all.data(), whole, mine.data(), part, part, sizeof(float));
    for (std::size_t k = 0; k < mine.size(); ++k) {
      ASSERT_EQ(mine[k], static_cast<float>(part.offsets[0] * 15 + static_cast<std::int64_t>(k)));
    }
  }
  // A column block of the middle dimension, strided in both layouts.
  const Box mid = box({1, 1, 2}, {2, 2, 3});
  std::vector<float> block(12);
  copy_region(all.data(), whole, block.data(), mid, mid, sizeof(float));
  std::size_t k = 0;
  for (std::int64_t a = 1; a < 3; ++a) {
    for (std::int64_t b = 1; b < 3; ++b) {
      for (std::int64_t c = 2; c < 5; ++c) {
        ASSERT_EQ(block[k++], static_cast<float>(a * 15 + b * 5 + c));
      }
    }
  }
  try {
    copy_region(all.data(), whole, block.data(), mid, box({1, 1, 2}, {2, 2, 4}), sizeof(float));
    ADD_FAILURE() << "a region outside the destination was copied";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not within both"));
  }
}

}  // namespace
}  // namespace baton::store
