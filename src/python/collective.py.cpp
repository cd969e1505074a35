// Collectives from Python: groups made at the controller from a mesh of Python actors, joined
// by each member, and the operations on CPU buffers (numpy arrays, torch tensors) by address,
// element type and count. The Python object that owns the memory is held until the operation
// is over.

#include <pybind11/stl.h>

#include "baton/collective/collective.hpp"
#include "collective/reduce.hpp"
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

/// The element type numpy or torch calls `name`.
col::DType dtype_named(const std::string& name) {
  static const std::pair<const char*, col::DType> names[] = {
      {"float32", col::DType::f32},   {"float", col::DType::f32},   {"float64", col::DType::f64},
      {"double", col::DType::f64},    {"float16", col::DType::f16}, {"half", col::DType::f16},
      {"bfloat16", col::DType::bf16}, {"int8", col::DType::i8},     {"uint8", col::DType::u8},
      {"int32", col::DType::i32},     {"int", col::DType::i32},     {"int64", col::DType::i64},
      {"long", col::DType::i64}};
  for (const auto& [n, t] : names) {
    if (name == n) return t;
  }
  throw UsageError("collectives do not move elements of type " + name +
                   " (float32/64, float16, bfloat16, int8, uint8, int32, int64)");
}

/// `f.template operator()<T>()` (a collective's future) for the element type named `dtype`.
template <class F>
Future<void> with_dtype(const std::string& dtype, F&& f) {
  Future<void> out;
  col::with_type(dtype_named(dtype), [&]<class T>() { out = f.template operator()<T>(); });
  return out;
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
