#include "baton/slice/slice.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace baton {
namespace {

std::string join(const std::vector<std::size_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

bool valid_label(std::string_view label) {
  if (label.empty() || label.size() > 64) return false;
  return std::all_of(label.begin(), label.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool mul_overflows(std::size_t a, std::size_t b) {
  return b != 0 && a > std::numeric_limits<std::size_t>::max() / b;
}

}  // namespace

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
    if (mul_overflows(count, sizes_[d]) || mul_overflows(sizes_[d] - 1, strides_[d])) {
      throw SliceError("slice " + join(sizes_) + " x " + join(strides_) + " overflows");
    }
    count *= sizes_[d];
    const std::size_t extent = (sizes_[d] - 1) * strides_[d];
    if (last > std::numeric_limits<std::size_t>::max() - extent) {
      throw SliceError("slice " + join(sizes_) + " x " + join(strides_) + " overflows");
    }
    last += extent;
  }
}

Slice Slice::row_major(std::vector<std::size_t> sizes) {
  std::vector<std::size_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) {
    if (mul_overflows(strides[d], sizes[d])) throw SliceError("row-major sizes overflow");
    strides[d - 1] = strides[d] * sizes[d];
  }
  return Slice(0, std::move(sizes), std::move(strides));
}

std::size_t Slice::len() const {
  return std::accumulate(sizes_.begin(), sizes_.end(), std::size_t{1}, std::multiplies<>());
}

std::size_t Slice::location(std::span<const std::size_t> coords) const {
  if (coords.size() != sizes_.size()) {
    throw SliceError("expected " + std::to_string(sizes_.size()) + " coordinates, got " +
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
  if (location < offset_) return std::nullopt;
  // Peel dimensions off from the largest stride down; then check the answer maps back, which
  // rejects locations in the gaps of strided slices.
  std::vector<std::size_t> order(sizes_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return strides_[a] > strides_[b]; });
  std::vector<std::size_t> coords(sizes_.size(), 0);
  std::size_t rem = location - offset_;
  for (std::size_t d : order) {
    if (sizes_[d] == 1 || strides_[d] == 0) continue;
    const std::size_t c = rem / strides_[d];
    if (c >= sizes_[d]) return std::nullopt;
    coords[d] = c;
    rem -= c * strides_[d];
  }
  if (rem != 0) return std::nullopt;
  return coords;
}

std::vector<std::size_t> Slice::coordinates(std::size_t location) const {
  auto c = try_coordinates(location);
  if (!c) throw SliceError("location " + std::to_string(location) + " is not in " + to_string());
  return *c;
}

std::size_t Slice::location_of_rank(std::size_t rank) const {
  if (rank >= len()) {
    throw SliceError("rank " + std::to_string(rank) + " out of bounds (" + std::to_string(len()) +
                     " members)");
  }
  std::size_t loc = offset_;
  for (std::size_t d = sizes_.size(); d-- > 0;) {
    loc += (rank % sizes_[d]) * strides_[d];
    rank /= sizes_[d];
  }
  return loc;
}

std::optional<std::size_t> Slice::rank_of_location(std::size_t location) const {
  auto c = try_coordinates(location);
  if (!c) return std::nullopt;
  std::size_t rank = 0;
  for (std::size_t d = 0; d < sizes_.size(); ++d) rank = rank * sizes_[d] + (*c)[d];
  return rank;
}

std::vector<std::size_t> Slice::locations() const {
  std::vector<std::size_t> out;
  const std::size_t n = len();
  out.reserve(n);
  for (std::size_t r = 0; r < n; ++r) out.push_back(location_of_rank(r));
  return out;
}

std::string Slice::to_string() const {
  return "Slice(offset=" + std::to_string(offset_) + ", sizes=" + join(sizes_) +
         ", strides=" + join(strides_) + ")";
}

// --- Point ----------------------------------------------------------------------------------

std::size_t Point::operator[](std::string_view label) const {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == label) return coords[i];
  }
  throw SliceError("no dimension '" + std::string(label) + "' in point " + to_string());
}

std::string Point::to_string() const {
  std::string out = "{";
  for (std::size_t i = 0; i < labels.size(); ++i) {
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
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (!valid_label(labels_[i])) {
      throw SliceError("invalid dimension name '" + labels_[i] +
                       "': use 1-64 characters of [A-Za-z0-9_]");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (labels_[i] == labels_[j])
        throw SliceError("dimension '" + labels_[i] + "' appears twice");
    }
  }
}

Shape Shape::of(const std::vector<std::pair<std::string, std::size_t>>& dims) {
  std::vector<std::string> labels;
  std::vector<std::size_t> sizes;
  for (const auto& [label, size] : dims) {
    labels.push_back(label);
    sizes.push_back(size);
  }
  return Shape(std::move(labels), Slice::row_major(std::move(sizes)));
}

std::size_t Shape::dim_index(std::string_view dim) const {
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] == dim) return i;
  }
  throw SliceError("no dimension '" + std::string(dim) + "' in shape " + to_string());
}

std::size_t Shape::size(std::string_view dim) const {
  return slice_.sizes()[dim_index(dim)];
}

bool Shape::has(std::string_view dim) const {
  return std::find(labels_.begin(), labels_.end(), dim) != labels_.end();
}

Point Shape::point(std::size_t rank) const {
  if (rank >= len()) {
    throw SliceError("rank " + std::to_string(rank) + " out of bounds for shape " + to_string() +
                     " (" + std::to_string(len()) + " members)");
  }
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
      throw SliceError("index " + std::to_string(coords[d]) + " out of bounds for '" + labels_[d] +
                       "' (size " + std::to_string(slice_.sizes()[d]) + ")");
    }
    rank = rank * slice_.sizes()[d] + coords[d];
  }
  return rank;
}

std::size_t Shape::location(std::size_t rank) const {
  return slice_.location_of_rank(rank);
}

Shape Shape::at(std::string_view dim, std::size_t index) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  if (index >= size) {
    throw SliceError("index " + std::to_string(index) + " out of bounds for '" + std::string(dim) +
                     "' (size " + std::to_string(size) + ")");
  }
  auto labels = labels_;
  auto sizes = slice_.sizes();
  auto strides = slice_.strides();
  const std::size_t offset = slice_.offset() + index * strides[d];
  labels.erase(labels.begin() + static_cast<std::ptrdiff_t>(d));
  sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(d));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  return Shape(std::move(labels), Slice(offset, std::move(sizes), std::move(strides)));
}

Shape Shape::range(std::string_view dim, std::size_t begin, std::size_t end,
                   std::size_t step) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  if (step == 0) throw SliceError("range step for '" + std::string(dim) + "' must be at least 1");
  if (begin >= end || end > size) {
    throw SliceError("range " + std::to_string(begin) + ".." + std::to_string(end) +
                     " out of bounds for '" + std::string(dim) + "' (size " + std::to_string(size) +
                     ")");
  }
  auto sizes = slice_.sizes();
  auto strides = slice_.strides();
  const std::size_t offset = slice_.offset() + begin * strides[d];
  sizes[d] = (end - begin + step - 1) / step;
  strides[d] *= step;
  return Shape(labels_, Slice(offset, std::move(sizes), std::move(strides)));
}

Shape Shape::flatten(std::string name) const {
  // Expressible with one stride when each dimension's stride is the next one's span.
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
      throw SliceError("cannot flatten " + to_string() + " (" + slice_.to_string() +
                       ") into one dimension: its members are not evenly spaced; slice it into "
                       "evenly spaced parts first");
    }
    expected = stride * size;
  }
  return Shape({std::move(name)}, Slice(slice_.offset(), {len()}, {inner}));
}

Shape Shape::rename(std::string_view from, std::string to) const {
  const std::size_t d = dim_index(from);
  auto labels = labels_;
  labels[d] = std::move(to);
  return Shape(std::move(labels), slice_);
}

Shape Shape::split(std::string_view dim,
                   const std::vector<std::pair<std::string, std::size_t>>& into) const {
  const std::size_t d = dim_index(dim);
  const std::size_t size = slice_.sizes()[d];
  std::size_t product = 1;
  for (const auto& [label, n] : into) {
    if (n == 0 || mul_overflows(product, n)) {
      throw SliceError("split of '" + std::string(dim) + "' needs sizes of at least 1");
    }
    product *= n;
  }
  if (into.empty() || product != size) {
    throw SliceError("cannot split '" + std::string(dim) + "' (size " + std::to_string(size) +
                     ") into parts whose sizes multiply to " + std::to_string(product));
  }
  std::vector<std::string> labels(labels_.begin(),
                                  labels_.begin() + static_cast<std::ptrdiff_t>(d));
  std::vector<std::size_t> sizes(slice_.sizes().begin(),
                                 slice_.sizes().begin() + static_cast<std::ptrdiff_t>(d));
  std::vector<std::size_t> strides(slice_.strides().begin(),
                                   slice_.strides().begin() + static_cast<std::ptrdiff_t>(d));
  std::vector<std::size_t> part_strides(into.size());
  std::size_t s = slice_.strides()[d];
  for (std::size_t i = into.size(); i-- > 0;) {
    part_strides[i] = s;
    s *= into[i].second;
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
