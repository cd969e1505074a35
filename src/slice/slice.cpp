#include "baton/slice/slice.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>

namespace baton {
namespace {

constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();

std::string join(const std::vector<std::size_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

bool valid_label(std::string_view label) {
  if (label.empty() || label.size() > kMaxLabelSize) return false;
  return std::all_of(label.begin(), label.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

void check_labels(const std::vector<std::string>& labels) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!valid_label(labels[i])) {
      throw SliceError("invalid dimension name " + quoted(labels[i]) + ": use 1-" +
                       std::to_string(kMaxLabelSize) + " characters of [A-Za-z0-9_]");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[i] == labels[j]) {
        throw SliceError("dimension name " + quoted(labels[i]) +
                         " appears twice; give each dimension a unique name");
      }
    }
  }
}

bool mul_overflows(std::size_t a, std::size_t b) {
  return b != 0 && a > kMaxSize / b;
}

/// Dimensions with more than one member, from the smallest stride to the largest (a stable
/// order: equal strides keep their dimensions' order). In place, since a slice has at most
/// kMaxDims dimensions: every rank_of_location() of a cast's node asks for it.
struct StrideOrder {
  std::array<std::uint8_t, kMaxDims> dims{};
  std::size_t n = 0;
};
StrideOrder by_stride(const std::vector<std::size_t>& sizes,
                      const std::vector<std::size_t>& strides) {
  StrideOrder order;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] <= 1) continue;
    std::size_t i = order.n++;
    for (; i > 0 && strides[order.dims[i - 1]] > strides[d]; --i) order.dims[i] = order.dims[i - 1];
    order.dims[i] = static_cast<std::uint8_t>(d);
  }
  return order;
}

/// The coordinates of `location` in the slice (offset, sizes, strides), into `coords` (one per
/// dimension); false if the slice has no such location.
bool coordinates_into(std::size_t offset, const std::vector<std::size_t>& sizes,
                      const std::vector<std::size_t>& strides, std::size_t location,
                      std::size_t* coords) {
  if (location < offset) return false;
  // The constructor guarantees strides nest, so from the largest stride down each coordinate is
  // the quotient; a remainder left over means the location falls in a gap.
  const StrideOrder order = by_stride(sizes, strides);
  std::fill(coords, coords + sizes.size(), 0);
  std::size_t rem = location - offset;
  for (std::size_t i = order.n; i-- > 0;) {
    const std::size_t d = order.dims[i];
    const std::size_t c = rem / strides[d];
    if (c >= sizes[d]) return false;
    coords[d] = c;
    rem -= c * strides[d];
  }
  return rem == 0;
}

}  // namespace

namespace detail {

void throw_oversized(const char* what, std::uint64_t n, std::size_t limit) {
  throw SliceError("malformed payload: " + std::to_string(n) + " " + what + " (at most " +
                   std::to_string(limit) + ")");
}

void check_point(const std::vector<std::string>& labels, const std::vector<std::size_t>& coords) {
  if (labels.size() != coords.size()) {
    throw SliceError("malformed point: " + std::to_string(labels.size()) + " labels and " +
                     std::to_string(coords.size()) + " coordinates");
  }
  check_labels(labels);
}

}  // namespace detail

// --- Slice ----------------------------------------------------------------------------------

Slice::Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides)
    : offset_(offset), sizes_(std::move(sizes)), strides_(std::move(strides)) {
  if (sizes_.size() != strides_.size()) {
    throw SliceError("a slice needs one stride per size: got " + std::to_string(sizes_.size()) +
                     " sizes and " + std::to_string(strides_.size()) + " strides");
  }
  if (sizes_.size() > kMaxDims) {
    throw SliceError("a slice has at most " + std::to_string(kMaxDims) + " dimensions, got " +
                     std::to_string(sizes_.size()));
  }
  std::size_t last = offset_;
  std::size_t count = 1;
  for (std::size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] == 0) throw SliceError("dimension sizes must be at least 1: " + join(sizes_));
    const bool overflows = mul_overflows(count, sizes_[d]) ||
                           mul_overflows(sizes_[d] - 1, strides_[d]) ||
                           last > kMaxSize - (sizes_[d] - 1) * strides_[d];
    if (overflows) {
      throw SliceError(to_string() + " overflows: its member count or last location exceeds " +
                       std::to_string(kMaxSize));
    }
    count *= sizes_[d];
    last += (sizes_[d] - 1) * strides_[d];
  }
  // Each stride must step past everything the smaller strides reach. That makes the map from
  // coordinates to locations one-to-one and lets coordinates() peel dimensions off greedily;
  // row-major, column-major and every at/range/split of them qualify.
  std::size_t reach = 0;
  const StrideOrder order = by_stride(sizes_, strides_);
  for (std::size_t i = 0; i < order.n; ++i) {
    const std::size_t d = order.dims[i];
    if (strides_[d] <= reach) {
      throw SliceError(to_string() + " has interleaved dimensions: the stride " +
                       std::to_string(strides_[d]) + " of dimension " + std::to_string(d) +
                       " must exceed " + std::to_string(reach) +
                       ", the reach of the smaller strides, so that each location has one "
                       "coordinate");
    }
    reach += (sizes_[d] - 1) * strides_[d];
  }
}

Slice Slice::row_major(std::vector<std::size_t> sizes) {
  // A zero size would hide an overflow of the others' product; report it first.
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) {
    throw SliceError("dimension sizes must be at least 1: " + join(sizes));
  }
  std::vector<std::size_t> strides(sizes.size(), 1);
  std::size_t count = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (mul_overflows(count, sizes[d])) {
      throw SliceError("row-major sizes " + join(sizes) + " have more than " +
                       std::to_string(kMaxSize) + " members");
    }
    strides[d] = count;
    count *= sizes[d];
  }
  return Slice(0, std::move(sizes), std::move(strides));
}

std::size_t Slice::len() const {
  return std::accumulate(sizes_.begin(), sizes_.end(), std::size_t{1}, std::multiplies<>());
}

std::size_t Slice::location(std::span<const std::size_t> coords) const {
  if (coords.size() != sizes_.size()) {
    throw SliceError("a slice of " + std::to_string(sizes_.size()) + " dimensions needs " +
                     std::to_string(sizes_.size()) + " coordinates, got " +
                     std::to_string(coords.size()));
  }
  std::size_t loc = offset_;
  for (std::size_t d = 0; d < coords.size(); ++d) {
    if (coords[d] >= sizes_[d]) {
      throw SliceError("coordinate " + std::to_string(coords[d]) + " out of bounds for dimension " +
                       std::to_string(d) + " (size " + std::to_string(sizes_[d]) + ")");
    }
    loc += coords[d] * strides_[d];
  }
  return loc;
}

std::optional<std::vector<std::size_t>> Slice::try_coordinates(std::size_t location) const {
  std::vector<std::size_t> coords(sizes_.size(), 0);
  if (!coordinates_into(offset_, sizes_, strides_, location, coords.data())) return std::nullopt;
  return coords;
}

std::vector<std::size_t> Slice::coordinates(std::size_t location) const {
  auto c = try_coordinates(location);
  if (!c) throw SliceError("location " + std::to_string(location) + " is not in " + to_string());
  return *c;
}

std::size_t Slice::location_of_rank(std::size_t rank) const {
  if (rank >= len()) {
    throw SliceError("rank " + std::to_string(rank) + " out of bounds for " + to_string() + " (" +
                     std::to_string(len()) + " members)");
  }
  std::size_t loc = offset_;
  for (std::size_t d = sizes_.size(); d-- > 0;) {
    loc += (rank % sizes_[d]) * strides_[d];
    rank /= sizes_[d];
  }
  return loc;
}

std::optional<std::size_t> Slice::rank_of_location(std::size_t location) const {
  std::array<std::size_t, kMaxDims> c{};
  if (!coordinates_into(offset_, sizes_, strides_, location, c.data())) return std::nullopt;
  std::size_t rank = 0;
  for (std::size_t d = 0; d < sizes_.size(); ++d) rank = rank * sizes_[d] + c[d];
  return rank;
}

std::vector<std::size_t> Slice::locations() const {
  std::vector<std::size_t> out;
  const std::size_t n = len();
  out.reserve(n);
  for (std::size_t r = 0; r < n; ++r) out.push_back(location_of_rank(r));
  return out;
}

bool Slice::operator==(const Slice& other) const {
  if (offset_ != other.offset_ || sizes_ != other.sizes_) return false;
  for (std::size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] > 1 && strides_[d] != other.strides_[d]) return false;
  }
  return true;
}

std::string Slice::to_string() const {
  return "Slice(offset=" + std::to_string(offset_) + ", sizes=" + join(sizes_) +
         ", strides=" + join(strides_) + ")";
}

// --- Point ----------------------------------------------------------------------------------

std::size_t Point::operator[](std::string_view label) const {
  for (std::size_t i = 0; i < labels.size() && i < coords.size(); ++i) {
    if (labels[i] == label) return coords[i];
  }
  throw SliceError("no dimension " + quoted(label) + " in point " + to_string());
}

std::string Point::to_string() const {
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size() && i < coords.size(); ++i) {
    if (i > 0) out += ", ";
    out += labels[i] + ": " + std::to_string(coords[i]);
  }
  return out + "}";
}

// --- Shape ----------------------------------------------------------------------------------

Shape::Shape(std::vector<std::string> labels, Slice slice)
    : labels_(std::move(labels)), slice_(std::move(slice)) {
  if (labels_.size() != slice_.num_dims()) {
    throw SliceError("a shape needs one label per dimension: got " +
                     std::to_string(labels_.size()) + " labels for " +
                     std::to_string(slice_.num_dims()) + " dimensions");
  }
  check_labels(labels_);
}

Shape Shape::of(const std::vector<std::pair<std::string, std::size_t>>& dims) {
  std::vector<std::string> labels;
  std::vector<std::size_t> sizes;
  for (const auto& [label, size] : dims) {
    if (size == 0) {
      throw SliceError("dimension " + quoted(label) +
                       " has size 0; every dimension needs at least 1 member");
    }
    labels.push_back(label);
    sizes.push_back(size);
  }
  return Shape(std::move(labels), Slice::row_major(std::move(sizes)));
}

std::size_t Shape::dim_index(std::string_view dim) const {
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] == dim) return i;
  }
  throw SliceError("no dimension " + quoted(dim) + " in shape " + to_string());
}

void Shape::check_rank(std::size_t rank) const {
  if (rank >= len()) {
    throw SliceError("rank " + std::to_string(rank) + " out of bounds for shape " + to_string() +
                     " (" + std::to_string(len()) + " members)");
  }
}

std::size_t Shape::size(std::string_view dim) const {
  return slice_.sizes()[dim_index(dim)];
}

bool Shape::has(std::string_view dim) const {
  return std::find(labels_.begin(), labels_.end(), dim) != labels_.end();
}

Point Shape::point(std::size_t rank) const {
  check_rank(rank);
  Point p{labels_, std::vector<std::size_t>(labels_.size()), rank};
  for (std::size_t d = labels_.size(); d-- > 0;) {
    p.coords[d] = rank % slice_.sizes()[d];
    rank /= slice_.sizes()[d];
  }
  return p;
}

std::vector<Point> Shape::points() const {
  std::vector<Point> out;
  const std::size_t n = len();
  out.reserve(n);
  for (std::size_t r = 0; r < n; ++r) out.push_back(point(r));
  return out;
}

std::size_t Shape::rank_of(std::span<const std::size_t> coords) const {
  if (coords.size() != labels_.size()) {
    throw SliceError("shape " + to_string() + " needs " + std::to_string(labels_.size()) +
                     " coordinates, got " + std::to_string(coords.size()));
  }
  std::size_t rank = 0;
  for (std::size_t d = 0; d < coords.size(); ++d) {
    if (coords[d] >= slice_.sizes()[d]) {
      throw SliceError("index " + std::to_string(coords[d]) + " out of bounds for " +
                       quoted(labels_[d]) + " (size " + std::to_string(slice_.sizes()[d]) + ")");
    }
    rank = rank * slice_.sizes()[d] + coords[d];
  }
  return rank;
}

std::size_t Shape::location(std::size_t rank) const {
  check_rank(rank);
  return slice_.location_of_rank(rank);
}

Shape Shape::select(const std::vector<DimSelect>& dims) const {
  Shape out = *this;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (dims[j].dim == dims[i].dim) {
        throw SliceError("select: dimension '" + dims[i].dim + "' is named twice in " +
                         to_string());
      }
    }
    const DimSelect& d = dims[i];
    out = d.index ? out.at(d.dim, d.begin) : out.range(d.dim, d.begin, d.end);
  }
  return out;
}

Shape Shape::at(std::string_view dim, std::size_t index) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  if (index >= size) {
    throw SliceError("index " + std::to_string(index) + " out of bounds for " + quoted(dim) +
                     " (size " + std::to_string(size) + ")");
  }
  auto labels = labels_;
  auto sizes = slice_.sizes();
  auto strides = slice_.strides();
  const std::size_t offset = slice_.offset() + index * strides[d];
  const auto at_d = static_cast<std::ptrdiff_t>(d);
  labels.erase(labels.begin() + at_d);
  sizes.erase(sizes.begin() + at_d);
  strides.erase(strides.begin() + at_d);
  return Shape(std::move(labels), Slice(offset, std::move(sizes), std::move(strides)));
}

Shape Shape::range(std::string_view dim, std::size_t begin, std::size_t end,
                   std::size_t step) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  const std::string what = "range " + std::to_string(begin) + ".." + std::to_string(end);
  if (begin >= size || end > size) {
    throw SliceError(what + " out of bounds for " + quoted(dim) + " (size " + std::to_string(size) +
                     ")");
  }
  if (begin >= end) {
    throw SliceError("empty " + what + " for " + quoted(dim) + " (size " + std::to_string(size) +
                     "): end must be greater than begin");
  }
  if (step == 0) throw SliceError("range step for " + quoted(dim) + " must be at least 1");
  auto sizes = slice_.sizes();
  auto strides = slice_.strides();
  const std::size_t offset = slice_.offset() + begin * strides[d];
  sizes[d] = (end - begin - 1) / step + 1;
  // A step past the end keeps one member, whose stride no longer matters; keeping the old one
  // avoids an overflow for huge steps.
  if (sizes[d] > 1) strides[d] *= step;
  return Shape(labels_, Slice(offset, std::move(sizes), std::move(strides)));
}

Shape Shape::flatten(std::string name) const {
  // Rank order walks the last dimension fastest, so the members are evenly spaced exactly when
  // each dimension's stride is the next one's stride times its size (size-1 dimensions aside).
  std::size_t inner = 1;
  bool have_inner = false;
  std::size_t expected = 0;
  for (std::size_t d = slice_.num_dims(); d-- > 0;) {
    const std::size_t size = slice_.sizes()[d];
    const std::size_t stride = slice_.strides()[d];
    if (size == 1) continue;
    if (!have_inner) {
      inner = stride;
      have_inner = true;
    } else if (stride != expected) {
      throw SliceError("cannot flatten " + to_string() +
                       " into one dimension: its members are not evenly spaced (" +
                       slice_.to_string() +
                       "); flatten before slicing with a step, or flatten each part separately");
    }
    expected = stride * size;
  }
  return Shape({std::move(name)}, Slice(slice_.offset(), {len()}, {inner}));
}

Shape Shape::rename(std::string_view from, std::string to) const {
  const std::size_t d = dim_index(from);
  if (from != to && has(to)) {
    throw SliceError("cannot rename " + quoted(from) + " to " + quoted(to) + ": shape " +
                     to_string() + " already has a dimension " + quoted(to));
  }
  auto labels = labels_;
  labels[d] = std::move(to);
  return Shape(std::move(labels), slice_);
}

Shape Shape::split(std::string_view dim,
                   const std::vector<std::pair<std::string, std::size_t>>& into) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  if (into.empty()) throw SliceError("split of " + quoted(dim) + " needs at least one part");
  std::string parts = "{";
  for (const auto& [label, n] : into) {
    parts += (parts.size() > 1 ? ", " : "") + label + ": " + std::to_string(n);
  }
  parts += "}";
  const std::string what =
      "cannot split " + quoted(dim) + " (size " + std::to_string(size) + ") into " + parts;
  std::size_t product = 1;
  for (const auto& [label, n] : into) {
    if (n == 0) throw SliceError(what + ": every part needs at least 1 member");
    // Every part is at least 1, so the product only grows; stop before it can overflow.
    if (mul_overflows(product, n) || product * n > size) {
      throw SliceError(what + ": the part sizes multiply to more than " + std::to_string(size));
    }
    product *= n;
  }
  if (product != size) {
    throw SliceError(what + ": the part sizes multiply to " + std::to_string(product) + ", not " +
                     std::to_string(size));
  }
  const auto at_d = static_cast<std::ptrdiff_t>(d);
  std::vector<std::string> labels(labels_.begin(), labels_.begin() + at_d);
  std::vector<std::size_t> sizes(slice_.sizes().begin(), slice_.sizes().begin() + at_d);
  std::vector<std::size_t> strides(slice_.strides().begin(), slice_.strides().begin() + at_d);
  // The parts are row-major within the old dimension, so its last part keeps the old stride.
  // A part of more than one member never overflows (it spans no more than the old dimension);
  // one of size 1 never steps, so it falls back to the old stride rather than overflow.
  std::vector<std::size_t> part_strides(into.size());
  const std::size_t stride = slice_.strides()[d];
  std::size_t inner = 1;
  for (std::size_t i = into.size(); i-- > 0;) {
    part_strides[i] = mul_overflows(stride, inner) ? stride : stride * inner;
    inner *= into[i].second;
  }
  for (std::size_t i = 0; i < into.size(); ++i) {
    labels.push_back(into[i].first);
    sizes.push_back(into[i].second);
    strides.push_back(part_strides[i]);
  }
  for (std::size_t i = d + 1; i < labels_.size(); ++i) {
    labels.push_back(labels_[i]);
    sizes.push_back(slice_.sizes()[i]);
    strides.push_back(slice_.strides()[i]);
  }
  return Shape(std::move(labels), Slice(slice_.offset(), std::move(sizes), std::move(strides)));
}

std::string Shape::to_string() const {
  std::string out = "{";
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (i > 0) out += ", ";
    out += labels_[i] + ": " + std::to_string(slice_.sizes()[i]);
  }
  return out + "}";
}

}  // namespace baton
