#pragma once

// Mesh geometry, pure math. A Slice is (offset, sizes, strides) over a flat space of locations
// (global ranks); a Shape names the Slice's dimensions; a Point is one member's coordinates.
// Ranks are row-major indices within a shape (0..len); locations are positions in the base.
//
// Shape::of({{"hosts", 2}, {"gpus", 8}}).at("hosts", 1).range("gpus", 0, 4)
//   -> {gpus: 4}, locations 8..11
//
// Every user error throws SliceError. Decoding re-validates and bounds every count before it
// allocates, so a hostile payload yields SliceError (or the archive's own error for a truncated
// stream), never an invalid object.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace baton {

/// A wrong use of mesh geometry: an unknown dimension, an index or range out of bounds.
class SliceError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The most dimensions a shape may have (also bounds what a decoder allocates).
inline constexpr std::size_t kMaxDims = 64;
/// The longest dimension name.
inline constexpr std::size_t kMaxLabelSize = 64;

namespace detail {
[[noreturn]] void throw_oversized(const char* what, std::uint64_t n, std::size_t limit);

// The encoders of these types are templates over the archive, so this header needs no
// serialization library: they are instantiated only where an archive is. Saving goes through
// the archive's own vector and string overloads; loading reads each count first (a 64-bit size,
// as binary archives lay it out) and refuses it before anything is allocated.
template <class Ar>
std::size_t load_count(Ar& ar, const char* what, std::size_t limit) {
  std::uint64_t n = 0;
  ar(n);
  if (n > limit) throw_oversized(what, n, limit);
  return static_cast<std::size_t>(n);
}

template <class Ar>
void load_numbers(Ar& ar, std::vector<std::size_t>& out, const char* what) {
  out.resize(load_count(ar, what, kMaxDims));
  for (auto& v : out) ar(v);
}

template <class Ar>
void load_labels(Ar& ar, std::vector<std::string>& out) {
  out.resize(load_count(ar, "labels", kMaxDims));
  for (auto& s : out) {
    s.resize(load_count(ar, "label characters", kMaxLabelSize));
    for (char& c : s) ar(c);
  }
}
}  // namespace detail

class Slice {
 public:
  /// The slice with no dimensions: one location, 0.
  Slice() = default;
  /// Throws SliceError if the vectors differ in length, a size is 0, a location would overflow,
  /// or the dimensions interleave so that a location could not be mapped back to one coordinate.
  Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides);
  /// Offset 0, the last dimension contiguous.
  static Slice row_major(std::vector<std::size_t> sizes);

  std::size_t offset() const { return offset_; }
  const std::vector<std::size_t>& sizes() const { return sizes_; }
  const std::vector<std::size_t>& strides() const { return strides_; }
  std::size_t num_dims() const { return sizes_.size(); }
  /// Number of members: the product of the sizes (1 for no dimensions).
  std::size_t len() const;

  /// offset + sum(coord * stride); throws if a coordinate is out of bounds.
  std::size_t location(std::span<const std::size_t> coords) const;
  /// The coordinates of a location; throws if the location is not in this slice.
  std::vector<std::size_t> coordinates(std::size_t location) const;
  /// The location of the member with this row-major rank; throws if rank >= len().
  std::size_t location_of_rank(std::size_t rank) const;
  /// The row-major rank of a location, or nullopt if the location is not in this slice.
  std::optional<std::size_t> rank_of_location(std::size_t location) const;
  /// Every location in rank order.
  std::vector<std::size_t> locations() const;
  bool contains(std::size_t location) const { return rank_of_location(location).has_value(); }
  /// `Slice(offset=0, sizes=[2, 8], strides=[8, 1])`
  std::string to_string() const;
  /// Equal offsets and sizes and the same location for every rank: the stride of a dimension of
  /// size 1 is never used, so it does not count.
  bool operator==(const Slice& other) const;

  template <class Ar>
  void save(Ar& ar) const {
    ar(offset_, sizes_, strides_);
  }
  template <class Ar>
  void load(Ar& ar) {
    std::size_t offset = 0;
    std::vector<std::size_t> sizes;
    std::vector<std::size_t> strides;
    ar(offset);
    detail::load_numbers(ar, sizes, "sizes");
    detail::load_numbers(ar, strides, "strides");
    *this = Slice(offset, std::move(sizes), std::move(strides));
  }

 private:
  std::optional<std::vector<std::size_t>> try_coordinates(std::size_t location) const;

  std::size_t offset_ = 0;
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> strides_;
};

/// One member of a shape: its coordinates, by dimension name, and its rank in the shape.
struct Point {
  std::vector<std::string> labels;
  std::vector<std::size_t> coords;
  std::size_t rank = 0;

  /// The coordinate along `label`; throws SliceError if the point has no such dimension.
  std::size_t operator[](std::string_view label) const;
  /// `{hosts: 1, gpus: 3}`
  std::string to_string() const;
  bool operator==(const Point&) const = default;

  template <class Ar>
  void save(Ar& ar) const {
    ar(labels, coords, rank);
  }
  template <class Ar>
  void load(Ar& ar);
};

namespace detail {
/// Throws SliceError unless the labels are valid, unique and one per coordinate.
void check_point(const std::vector<std::string>& labels, const std::vector<std::size_t>& coords);
}  // namespace detail

template <class Ar>
void Point::load(Ar& ar) {
  std::vector<std::string> l;
  std::vector<std::size_t> c;
  std::size_t r = 0;
  detail::load_labels(ar, l);
  detail::load_numbers(ar, c, "coordinates");
  ar(r);
  detail::check_point(l, c);
  labels = std::move(l);
  coords = std::move(c);
  rank = r;
}

/// One dimension of a multi-dimension slice: `{"hosts", 0}` selects an index and drops the
/// dimension; `{"gpus", {0, 4}}` keeps the range [0, 4).
struct DimSelect {
  struct Range {
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  DimSelect(std::string d, std::size_t i) : dim(std::move(d)), begin(i), end(i + 1), index(true) {}
  DimSelect(std::string d, Range r) : dim(std::move(d)), begin(r.begin), end(r.end) {}

  std::string dim;
  std::size_t begin = 0;
  std::size_t end = 0;
  bool index = false;  // true: the dimension is dropped
};

class Shape {
 public:
  /// The shape with no dimensions: one member.
  Shape() = default;
  /// Throws SliceError for duplicate, empty or invalid labels, or a count that differs from the
  /// slice's dimensions.
  Shape(std::vector<std::string> labels, Slice slice);
  /// A row-major shape at offset 0, e.g. Shape::of({{"hosts", 2}, {"gpus", 8}}).
  static Shape of(const std::vector<std::pair<std::string, std::size_t>>& dims);

  const std::vector<std::string>& labels() const { return labels_; }
  const Slice& slice() const { return slice_; }
  std::size_t num_dims() const { return labels_.size(); }
  std::size_t len() const { return slice_.len(); }
  /// The size of `dim`; throws SliceError if there is no such dimension.
  std::size_t size(std::string_view dim) const;
  bool has(std::string_view dim) const;

  /// The member with this rank; throws SliceError if rank >= len().
  Point point(std::size_t rank) const;
  /// Every member in rank order.
  std::vector<Point> points() const;
  /// The rank of the member at these coordinates (one per dimension, in order).
  std::size_t rank_of(std::span<const std::size_t> coords) const;
  /// The global location of the member with this rank.
  std::size_t location(std::size_t rank) const;
  /// Every member's global location in rank order.
  std::vector<std::size_t> locations() const { return slice_.locations(); }

  /// Selects one index of `dim` and drops the dimension.
  Shape at(std::string_view dim, std::size_t index) const;
  /// Keeps [begin, end) of `dim` with a step; the dimension stays.
  Shape range(std::string_view dim, std::size_t begin, std::size_t end, std::size_t step = 1) const;
  /// Several dimensions at once: select({{"hosts", 0}, {"gpus", {0, 4}}}); throws SliceError
  /// for an unknown or repeated dimension or an index out of range.
  Shape select(const std::vector<DimSelect>& dims) const;
  /// All dimensions into one named `name`; throws if no single stride can express it.
  Shape flatten(std::string name) const;
  /// The same shape with dimension `from` called `to`.
  Shape rename(std::string_view from, std::string to) const;
  /// One dimension into several whose sizes multiply to its size, e.g. hosts into dp x pp.
  Shape split(std::string_view dim,
              const std::vector<std::pair<std::string, std::size_t>>& into) const;

  /// `{hosts: 2, gpus: 8}`
  std::string to_string() const;
  bool operator==(const Shape&) const = default;

  template <class Ar>
  void save(Ar& ar) const {
    ar(labels_, slice_);
  }
  template <class Ar>
  void load(Ar& ar) {
    std::vector<std::string> labels;
    Slice slice;
    detail::load_labels(ar, labels);
    ar(slice);
    *this = Shape(std::move(labels), std::move(slice));
  }

 private:
  std::size_t dim_index(std::string_view dim) const;
  void check_rank(std::size_t rank) const;

  std::vector<std::string> labels_;
  Slice slice_;
};

}  // namespace baton
