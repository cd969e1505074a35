#pragma once

// Boxes of a global tensor, the geometry of baton's tensor store: the region a shard covers and
// the region a reader asks for, what of a tensor its shards leave uncovered, and the strided copy
// that moves the elements of a region between two row-major layouts (resharding). Also where
// torch's DTensor placements (Shard(d), Replicate()) put each rank's shard.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace baton::store {

/// A region of a tensor: for each dimension, its first index and its extent. Its elements, laid
/// out on their own, are row-major (the last dimension contiguous).
struct Box {
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;

  /// The whole of a tensor of `shape`.
  static Box whole(const std::vector<std::int64_t>& shape);

  std::size_t rank() const { return sizes.size(); }
  /// How many elements it holds (1 for a box of rank 0: a scalar).
  std::int64_t elements() const;
  /// Whether it holds no element (an extent of 0).
  bool empty() const { return elements() == 0; }
  /// "[0:4, 2:6]": each dimension's [first:end).
  std::string to_string() const;

  bool operator==(const Box&) const = default;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(offsets, sizes);
  }
};

/// The region both cover; nullopt if they do not meet (or differ in rank).
std::optional<Box> intersect(const Box& a, const Box& b);

/// Whether every element of `inner` is in `outer`.
bool contains(const Box& outer, const Box& inner);

/// What of `whole` no box of `parts` covers, as disjoint boxes (none: covered).
std::vector<Box> uncovered(const Box& whole, const std::vector<Box>& parts);

/// Copies the elements of `region` from `src`, the elements of `src_box` laid out row-major, to
/// `dst`, those of `dst_box` laid out the same way; each element is `element` bytes. `region`
/// must lie within both boxes (std::invalid_argument otherwise). Runs that are contiguous in
/// both layouts are copied whole.
void copy_region(const void* src, const Box& src_box, void* dst, const Box& dst_box,
                 const Box& region, std::size_t element);

/// How torch's DTensor lays out one dimension of a mesh over a tensor: Shard(d) splits tensor
/// dimension d among the mesh dimension's ranks, Replicate() gives each the whole.
struct Placement {
  enum class Kind : std::uint8_t { replicate, shard };
  Kind kind = Kind::replicate;
  std::size_t dim = 0;  // the tensor dimension, for a shard

  static Placement shard(std::size_t d) { return {Kind::shard, d}; }
  static Placement replicate() { return {Kind::replicate, 0}; }
  bool operator==(const Placement&) const = default;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(kind, dim);
  }
};

/// Rank `index` of `count` in torch.chunk's split of `box` along `dim`: chunks of
/// ceil(extent / count), the last one shorter, and those past the end empty.
Box chunk(const Box& box, std::size_t dim, std::size_t index, std::size_t count);

/// The box of a tensor of `shape` that the rank at `coords` of a device mesh of `mesh_sizes`
/// holds under `placements` (one per mesh dimension, applied in order, as DTensor does: two
/// Shard(0) split dimension 0 twice). Throws std::invalid_argument for a placement that names
/// no dimension of the tensor, or coordinates outside the mesh.
Box placement_box(const std::vector<std::int64_t>& shape, const std::vector<Placement>& placements,
                  const std::vector<std::size_t>& mesh_sizes,
                  const std::vector<std::size_t>& coords);

}  // namespace baton::store
