#pragma once

// The views every mesh offers by its shape (proc meshes, actor meshes, value meshes): slice,
// flatten, rename and split, written once. A mesh derives from Sliceable<itself> and gives it
// shape() and a private view(const Shape&) (befriending Sliceable) that makes the mesh of a shape
// over some of its locations.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/slice/slice.hpp"

namespace baton {

template <class Mesh>
class Sliceable {
 public:
  /// The members with `dim` in [begin, end): a view; the dimension stays.
  Mesh slice(std::string_view dim, std::size_t begin, std::size_t end) const {
    return self().view(self().shape().range(dim, begin, end));
  }
  /// The members with `dim` == index; the dimension is dropped.
  Mesh slice(std::string_view dim, std::size_t index) const {
    return self().view(self().shape().at(dim, index));
  }
  /// Several dimensions at once: slice({{"hosts", 0}, {"gpus", {0, 4}}}).
  Mesh slice(const std::vector<DimSelect>& dims) const {
    return self().view(self().shape().select(dims));
  }
  /// The same members on one dimension named `name` (see Shape::flatten).
  Mesh flatten(std::string name) const {
    return self().view(self().shape().flatten(std::move(name)));
  }
  /// The same members with dimension `from` called `to`.
  Mesh rename(std::string_view from, std::string to) const {
    return self().view(self().shape().rename(from, std::move(to)));
  }
  /// The same members with dimension `dim` as several whose sizes multiply to its size, row
  /// major: split("hosts", {{"dp", 2}, {"pp", 4}}) (see Shape::split).
  Mesh split(std::string_view dim,
             const std::vector<std::pair<std::string, std::size_t>>& into) const {
    return self().view(self().shape().split(dim, into));
  }

 private:
  const Mesh& self() const { return static_cast<const Mesh&>(*this); }
};

}  // namespace baton
