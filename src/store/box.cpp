// The geometry of the tensor store (see box.hpp): boxes met, subtracted and copied between
// row-major layouts.

#include "baton/store/box.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace baton::store {

Box Box::whole(const std::vector<std::int64_t>& shape) {
  return {std::vector<std::int64_t>(shape.size(), 0), shape};
}

std::int64_t Box::elements() const {
  std::int64_t n = 1;
  for (const std::int64_t s : sizes) n *= std::max<std::int64_t>(s, 0);
  return n;
}

std::string Box::to_string() const {
  std::string out = "[";
  for (std::size_t d = 0; d < rank(); ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + sizes[d]);
  }
  return out + "]";
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  if (a.rank() != b.rank()) return std::nullopt;
  Box out;
  for (std::size_t d = 0; d < a.rank(); ++d) {
    const std::int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const std::int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets.push_back(lo);
    out.sizes.push_back(hi - lo);
  }
  return out;
}

bool contains(const Box& outer, const Box& inner) {
  if (outer.rank() != inner.rank()) return false;
  for (std::size_t d = 0; d < outer.rank(); ++d) {
    if (inner.offsets[d] < outer.offsets[d] ||
        inner.offsets[d] + inner.sizes[d] > outer.offsets[d] + outer.sizes[d]) {
      return false;
    }
  }
  return true;
}

std::vector<Box> uncovered(const Box& whole, const std::vector<Box>& parts) {
  std::vector<Box> left;
  if (!whole.empty()) left.push_back(whole);
  for (const Box& part : parts) {
    std::vector<Box> next;
    for (const Box& b : left) {
      const std::optional<Box> cut = intersect(b, part);
      if (!cut) {
        next.push_back(b);
        continue;
      }
      // b less the cut: the slabs of b below and above the cut in each dimension in turn, each
      // dimension narrowed to the cut once its slabs are taken.
      Box rest = b;
      for (std::size_t d = 0; d < rest.rank(); ++d) {
        const std::int64_t rest_end = rest.offsets[d] + rest.sizes[d];
        const std::int64_t cut_end = cut->offsets[d] + cut->sizes[d];
        if (cut->offsets[d] > rest.offsets[d]) {
          Box below = rest;
          below.sizes[d] = cut->offsets[d] - rest.offsets[d];
          next.push_back(std::move(below));
        }
        if (rest_end > cut_end) {
          Box above = rest;
          above.offsets[d] = cut_end;
          above.sizes[d] = rest_end - cut_end;
          next.push_back(std::move(above));
        }
        rest.offsets[d] = cut->offsets[d];
        rest.sizes[d] = cut->sizes[d];
      }
    }
    left = std::move(next);
  }
  return left;
}

void copy_region(const void* src, const Box& src_box, void* dst, const Box& dst_box,
                 const Box& region, std::size_t element) {
  if (!contains(src_box, region) || !contains(dst_box, region)) {
    throw std::invalid_argument("copy_region: " + region.to_string() + " is not within both " +
                                src_box.to_string() + " and " + dst_box.to_string());
  }
  if (region.empty()) return;
  const std::size_t rank = region.rank();
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst);
  if (rank == 0) {
    std::memcpy(to, from, element);
    return;
  }
  // Strides, in elements, of each layout.
  std::vector<std::int64_t> src_stride(rank, 1);
  std::vector<std::int64_t> dst_stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * src_box.sizes[d];
    dst_stride[d - 1] = dst_stride[d] * dst_box.sizes[d];
  }
  // The run copied at once: the last dimension, and each one before it while the region spans
  // the whole of the dimensions after it in both layouts.
  std::size_t first = rank - 1;
  std::int64_t run = region.sizes[first];
  while (first > 0 && region.sizes[first] == src_box.sizes[first] &&
         region.sizes[first] == dst_box.sizes[first]) {
    --first;
    run *= region.sizes[first];
  }
  // Where the region starts in each layout.
  std::int64_t src_at = 0;
  std::int64_t dst_at = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    src_at += (region.offsets[d] - src_box.offsets[d]) * src_stride[d];
    dst_at += (region.offsets[d] - dst_box.offsets[d]) * dst_stride[d];
  }
  const auto bytes = static_cast<std::size_t>(run) * element;
  std::vector<std::int64_t> index(first, 0);  // over the dimensions before the run
  for (;;) {
    std::int64_t s = src_at;
    std::int64_t t = dst_at;
    for (std::size_t d = 0; d < first; ++d) {
      s += index[d] * src_stride[d];
      t += index[d] * dst_stride[d];
    }
    std::memcpy(to + static_cast<std::size_t>(t) * element,
                from + static_cast<std::size_t>(s) * element, bytes);
    std::size_t d = first;
    while (d > 0) {
      --d;
      if (++index[d] < region.sizes[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (first == 0) return;
  }
}

Box chunk(const Box& box, std::size_t dim, std::size_t index, std::size_t count) {
  if (dim >= box.rank()) {
    throw std::invalid_argument("chunk: dimension " + std::to_string(dim) + " of a box of rank " +
                                std::to_string(box.rank()));
  }
  if (count == 0 || index >= count) {
    throw std::invalid_argument("chunk: rank " + std::to_string(index) + " of " +
                                std::to_string(count));
  }
  const std::int64_t n = box.sizes[dim];
  const std::int64_t each =
      (n + static_cast<std::int64_t>(count) - 1) / static_cast<std::int64_t>(count);
  const std::int64_t start = std::min(static_cast<std::int64_t>(index) * each, n);
  const std::int64_t end = std::min(start + each, n);
  Box out = box;
  out.offsets[dim] += start;
  out.sizes[dim] = end - start;
  return out;
}

Box placement_box(const std::vector<std::int64_t>& shape, const std::vector<Placement>& placements,
                  const std::vector<std::size_t>& mesh_sizes,
                  const std::vector<std::size_t>& coords) {
  if (placements.size() != mesh_sizes.size() || coords.size() != mesh_sizes.size()) {
    throw std::invalid_argument(
        "placement_box: one placement and one coordinate per mesh dimension (" +
        std::to_string(mesh_sizes.size()) + "), not " + std::to_string(placements.size()) +
        " and " + std::to_string(coords.size()));
  }
  Box box = Box::whole(shape);
  for (std::size_t m = 0; m < mesh_sizes.size(); ++m) {
    if (coords[m] >= mesh_sizes[m]) {
      throw std::invalid_argument("placement_box: coordinate " + std::to_string(coords[m]) +
                                  " of mesh dimension " + std::to_string(m) + " of size " +
                                  std::to_string(mesh_sizes[m]));
    }
    if (placements[m].kind != Placement::Kind::shard) continue;
    if (placements[m].dim >= shape.size()) {
      throw std::invalid_argument("placement_box: Shard(" + std::to_string(placements[m].dim) +
                                  ") of a tensor of " + std::to_string(shape.size()) +
                                  " dimensions");
    }
    box = chunk(box, placements[m].dim, coords[m], mesh_sizes[m]);
  }
  return box;
}

}  // namespace baton::store
