// Collectives from Python: groups made at the controller from a mesh of Python actors, joined
// by each member, and the operations on CPU buffers (numpy arrays, torch tensors) by address,
// element type and count. The Python object that owns the memory is held until the operation
// is over.

#include <pybind11/stl.h>

#include "baton/collective/collective.hpp"
#include "python/bindings.hpp"

namespace baton::python {
namespace {

namespace col = baton::collective;

col::ReduceOp reduce_op(const std::string& op) {
  if (op == "sum") return col::ReduceOp::sum;
  if (op == "avg") return col::ReduceOp::avg;
  if (op == "min") return col::ReduceOp::min;
  if (op == "max") return col::ReduceOp::max;
  throw UsageError("no reduce op '" + op + "': use sum, avg, min or max");
}

/// Calls `f.template operator()<T>()` for the element type named `dtype` (numpy's or torch's
/// name for it).
template <class F>
auto with_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float32" || dtype == "float") return f.template operator()<float>();
  if (dtype == "float64" || dtype == "double") return f.template operator()<double>();
  if (dtype == "float16" || dtype == "half") return f.template operator()<col::float16>();
  if (dtype == "bfloat16") return f.template operator()<col::bfloat16>();
  if (dtype == "int8") return f.template operator()<std::int8_t>();
  if (dtype == "uint8") return f.template operator()<std::uint8_t>();
  if (dtype == "int32" || dtype == "int") return f.template operator()<std::int32_t>();
  if (dtype == "int64" || dtype == "long") return f.template operator()<std::int64_t>();
  throw UsageError("collectives do not move elements of type " + dtype +
                   " (float32/64, float16, bfloat16, int8, uint8, int32, int64)");
}

template <class T>
std::span<T> span_at(std::uintptr_t address, std::size_t count) {
  return {reinterpret_cast<T*>(address), count};  // NOLINT: the Python side's buffer
}

Actor& actor_at(std::uintptr_t address) {
  return *reinterpret_cast<Actor*>(address);  // NOLINT: the PyActor holding the instance
}

/// `f` (the operation's future) with `owners` held until it completes.
std::shared_ptr<PyFuture> holding(Future<void> f, py::object owners) {
  auto out = wrap(std::move(f));
  hold_until(out, keep_object(std::move(owners)));
  return out;
}

}  // namespace

void bind_collectives(py::module_& m) {
  py::class_<col::Group>(m, "Group")
      .def("size", [](const col::Group& g) { return g.members.size(); })
      .def("to_wire", [](const col::Group& g) { return to_wire(g); })
      .def_static("from_wire", &from_wire<col::Group>);

  m.def("make_group", [](const Mesh& mesh, double timeout_s) {
    col::GroupOptions o;
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
    return col::make_group(mesh, o);
  });

  py::class_<col::Communicator>(m, "Communicator")
      .def(py::init<>())
      .def("join", [](col::Communicator& c, const col::Group& g,
                      std::uintptr_t actor) { return wrap(c.join(g, actor_at(actor))); })
      .def("rank", &col::Communicator::rank)
      .def("size", &col::Communicator::size)
      .def("allreduce",
           [](col::Communicator& c, py::object owner, std::uintptr_t data, std::size_t count,
              const std::string& dtype, const std::string& op) {
             const col::ReduceOp o = reduce_op(op);
             auto f = with_dtype(
                 dtype, [&]<class T>() { return c.allreduce(span_at<T>(data, count), o); });
             return holding(std::move(f), std::move(owner));
           })
      .def("broadcast",
           [](col::Communicator& c, py::object owner, std::uintptr_t data, std::size_t count,
              const std::string& dtype, int root) {
             auto f = with_dtype(
                 dtype, [&]<class T>() { return c.broadcast(span_at<T>(data, count), root); });
             return holding(std::move(f), std::move(owner));
           })
      .def("allgather",
           [](col::Communicator& c, py::object owners, std::uintptr_t in, std::size_t in_count,
              std::uintptr_t out, std::size_t out_count, const std::string& dtype) {
             auto f = with_dtype(dtype, [&]<class T>() {
               return c.allgather(std::span<const T>(span_at<T>(in, in_count)),
                                  span_at<T>(out, out_count));
             });
             return holding(std::move(f), std::move(owners));
           })
      .def("reduce_scatter",
           [](col::Communicator& c, py::object owners, std::uintptr_t in, std::size_t in_count,
              std::uintptr_t out, std::size_t out_count, const std::string& dtype,
              const std::string& op) {
             const col::ReduceOp o = reduce_op(op);
             auto f = with_dtype(dtype, [&]<class T>() {
               return c.reduce_scatter(std::span<const T>(span_at<T>(in, in_count)),
                                       span_at<T>(out, out_count), o);
             });
             return holding(std::move(f), std::move(owners));
           })
      .def("barrier", [](col::Communicator& c) { return wrap(c.barrier()); });
}

}  // namespace baton::python
