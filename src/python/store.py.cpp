// The tensor store from Python: the handle and its operations on memory the Python side names by
// address and size (numpy arrays, torch tensors, bytes); a value's bytes are copied into the
// store when put is called, so the caller may change its array at once. Reads come back as
// buffers (views of the bytes received) or straight into a destination the caller holds.

#include <pybind11/stl.h>

#include <chrono>
#include <cstring>

#include "baton/store/store.hpp"
#include "python/bindings.hpp"
#include "python/py_actor.hpp"

namespace baton::python {
namespace {

namespace st = baton::store;

using Shape = std::vector<std::int64_t>;
using MaybeBox = std::optional<std::pair<Shape, Shape>>;  // (offsets, sizes)

std::optional<st::Box> box_of(const MaybeBox& b) {
  if (!b) return std::nullopt;
  return st::Box{b->first, b->second};
}

py::tuple box_tuple(const st::Box& b) {
  return py::make_tuple(b.offsets, b.sizes);
}

/// (dtype, element, shape, (offsets, sizes), version) of what was read.
py::tuple got_info(const st::Got& g) {
  return py::make_tuple(g.info.dtype, g.info.element, g.info.shape, box_tuple(g.box), g.version);
}

Bytes copy_in(std::uintptr_t address, std::size_t size) {
  py::gil_scoped_release unlocked;
  return Bytes::copy(reinterpret_cast<const void*>(address), size);  // NOLINT: Python's memory
}

/// A put as Python gives it: (key, address, size, dtype, element, shape, shard, keep).
using PyPut = std::tuple<std::string, std::uintptr_t, std::size_t, std::string, std::size_t, Shape,
                         MaybeBox, std::size_t>;

}  // namespace

void bind_store(py::module_& m) {
  py::class_<st::DirectWriter>(m, "DirectWriter")
      .def("buffers", &st::DirectWriter::buffers)
      .def("acquire",
           [](const st::DirectWriter& w) {
             return wrap(w.acquire(), [](std::size_t i) { return py::object(py::int_(i)); });
           })
      .def("publish",
           [](const st::DirectWriter& w, std::size_t index) {
             return wrap(w.publish(index), [](const st::Put& put) {
               return py::object(py::make_tuple(put.version, put.complete));
             });
           })
      .def("close", [](const st::DirectWriter& w) { return wrap(w.close()); });

  py::class_<st::Store>(m, "Store")
      .def("volumes", &st::Store::volumes)
      .def("handle", &st::Store::handle)
      .def_static("from_handle", &st::Store::from_handle)
      .def("to_wire", [](const st::Store& s) { return to_wire(s); })
      .def_static("from_wire", &from_wire<st::Store>)
      .def("put",
           [](const st::Store& s, const std::string& key, std::uintptr_t address, std::size_t size,
              const std::string& dtype, std::size_t element, const Shape& shape,
              const MaybeBox& shard, std::size_t keep) {
             Bytes value = copy_in(address, size);
             return wrap(
                 s.put(key, std::move(value), st::TensorInfo{dtype, element, shape},
                       st::PutOptions{box_of(shard), keep}),
                 [](const st::Put& put) { return py::make_tuple(put.version, put.complete); });
           })
      .def("put_batch",
           [](const st::Store& s, const std::vector<PyPut>& puts) {
             std::vector<std::tuple<std::string, Bytes, st::TensorInfo, st::PutOptions>> batch;
             batch.reserve(puts.size());
             for (const auto& [key, address, size, dtype, element, shape, shard, keep] : puts) {
               batch.emplace_back(key, copy_in(address, size),
                                  st::TensorInfo{dtype, element, shape},
                                  st::PutOptions{box_of(shard), keep});
             }
             return wrap(s.put_batch(batch), [](const std::vector<st::Put>& done) {
               py::list out;
               for (const auto& p : done) out.append(py::make_tuple(p.version, p.complete));
               return py::object(out);
             });
           })
      .def("get",
           [](const st::Store& s, const std::string& key, std::optional<std::uint64_t> version,
              const MaybeBox& box) {
             return wrap(s.get(key, st::GetOptions{version, box_of(box)}), [](const st::Got& g) {
               return py::object(py::make_tuple(py::cast(g.data), got_info(g)));
             });
           })
      .def("get_into",
           [](const st::Store& s, const std::string& key, std::uintptr_t address, std::size_t size,
              std::optional<std::uint64_t> version, const MaybeBox& box, const std::string& dtype,
              py::object owner) {
             const std::span<std::byte> into(reinterpret_cast<std::byte*>(address),
                                             size);  // NOLINT
             auto out = wrap(s.get_into(key, into, st::GetOptions{version, box_of(box)}, dtype),
                             [](const st::Got& g) { return py::object(got_info(g)); });
             hold_until(out, keep_object(std::move(owner)));
             return out;
           })
      .def("get_batch",
           [](const st::Store& s, const std::vector<std::string>& keys) {
             return wrap(s.get_batch(keys), [](const std::vector<st::Got>& all) {
               py::list out;
               for (const auto& g : all) out.append(py::make_tuple(py::cast(g.data), got_info(g)));
               return py::object(out);
             });
           })
      .def("direct",
           [](const st::Store& s, const std::string& key,
              const std::vector<std::pair<std::uintptr_t, std::size_t>>& buffers,
              const std::string& dtype, std::size_t element, const Shape& shape,
              std::int64_t lease_ms) {
             std::vector<std::span<std::byte>> spans;
             spans.reserve(buffers.size());
             for (const auto& [address, size] : buffers) {
               spans.emplace_back(reinterpret_cast<std::byte*>(address), size);  // NOLINT
             }
             const st::DirectOptions options{std::chrono::milliseconds(lease_ms)};
             return wrap(s.direct(key, st::TensorInfo{dtype, element, shape}, spans, options),
                         [](const st::DirectWriter& w) { return py::cast(w); });
           })
      .def("exists",
           [](const st::Store& s, const std::string& key) {
             return wrap(s.exists(key), [](bool b) { return py::object(py::bool_(b)); });
           })
      .def("keys",
           [](const st::Store& s, const std::string& prefix) {
             return wrap(s.keys(prefix),
                         [](const std::vector<std::string>& k) { return py::object(py::cast(k)); });
           })
      .def("erase", [](const st::Store& s, const std::string& key) { return wrap(s.erase(key)); })
      .def("latest_version",
           [](const st::Store& s, const std::string& key) {
             return wrap(s.latest_version(key), [](const std::optional<std::uint64_t>& n) {
               return n ? py::object(py::int_(*n)) : py::object(py::none());
             });
           })
      .def("stats", [](const st::Store& s) {
        return wrap(s.stats(), [](const std::vector<st::VolumeStats>& all) {
          py::list out;
          for (const auto& v : all) {
            py::dict d;
            d["proc"] = v.proc;
            d["keys"] = v.keys;
            d["versions"] = v.versions;
            d["bytes_held"] = v.bytes_held;
            d["puts"] = v.puts;
            d["gets"] = v.gets;
            d["bytes_in"] = v.bytes_in;
            d["bytes_out"] = v.bytes_out;
            d["bytes_by_path"] = v.bytes_by_path;
            d["transfers_by_path"] = v.transfers_by_path;
            out.append(d);
          }
          return py::object(out);
        });
      });

  m.def("store_create",
        [](const ProcMesh& procs, const std::string& spread, const std::string& name) {
          st::Spread how = st::Spread::per_proc;
          if (spread == "single") {
            how = st::Spread::single;
          } else if (spread == "per_host") {
            how = st::Spread::per_host;
          } else if (spread != "per_proc") {
            throw UsageError("no store spread '" + spread + "': use per_proc, per_host or single");
          }
          return wrap(st::Store::create_async(procs, how, name),
                      [](const st::Store& s) { return py::cast(s); });
        });

  m.def("copy_buffer", [](const Bytes& from, std::uintptr_t address) {
    py::gil_scoped_release unlocked;
    std::memcpy(reinterpret_cast<void*>(address), from.data(), from.size());  // NOLINT
  });

  m.def("placement_box",
        [](const Shape& shape, const std::vector<std::pair<std::string, std::size_t>>& placements,
           const std::vector<std::size_t>& mesh_sizes, const std::vector<std::size_t>& coords) {
          std::vector<st::Placement> p;
          p.reserve(placements.size());
          for (const auto& [kind, dim] : placements) {
            p.push_back(kind == "shard" ? st::Placement::shard(dim) : st::Placement::replicate());
          }
          return box_tuple(st::placement_box(shape, p, mesh_sizes, coords));
        });
}

}  // namespace baton::python
