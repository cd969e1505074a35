// C++ actors from Python: spawned by the name their program exposed them under
// (baton/python/expose.hpp), their endpoints called by name, Python values converted to and from
// baton::Value on the way.

#include <pybind11/stl.h>

#include "baton/python/expose.hpp"
#include "python/bindings.hpp"

namespace baton::python {
namespace {

using Exposed = ActorMesh<ExposedCall>;

Value to_value_py(py::handle o, int depth = 0) {
  if (depth > Value::kMaxDepth) throw UsageError("a value nested too deep for a C++ actor");
  if (o.is_none()) return Value{};
  if (py::isinstance<py::bool_>(o)) return Value{o.cast<bool>()};
  if (py::isinstance<py::int_>(o)) return Value{o.cast<std::int64_t>()};
  if (py::isinstance<py::float_>(o)) return Value{o.cast<double>()};
  if (py::isinstance<py::str>(o)) return Value{o.cast<std::string>()};
  if (py::isinstance<py::bytes>(o) || py::isinstance<py::bytearray>(o) ||
      py::isinstance<py::memoryview>(o)) {
    const std::string b = py::bytes(py::reinterpret_borrow<py::object>(o));
    return Value{Bytes::copy(b)};
  }
  if (py::isinstance<py::dict>(o)) {
    Value::Dict d;
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(o)) {
      if (!py::isinstance<py::str>(k)) throw UsageError("a dict for a C++ actor has str keys");
      d.emplace_back(k.cast<std::string>(), to_value_py(v, depth + 1));
    }
    return Value{std::move(d)};
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    Value::List l;
    for (py::handle e : o) l.push_back(to_value_py(e, depth + 1));
    return Value{std::move(l)};
  }
  if (py::hasattr(o, "tolist")) return to_value_py(o.attr("tolist")(), depth);  // numpy, torch
  if (py::hasattr(o, "__index__")) return Value{o.attr("__index__")().cast<std::int64_t>()};
  if (py::hasattr(o, "__float__")) return Value{o.attr("__float__")().cast<double>()};
  throw UsageError("a C++ actor takes None, bool, int, float, str, bytes, lists and dicts; not " +
                   std::string(py::str(o.get_type().attr("__name__"))));
}

py::object from_value_py(const Value& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, Bytes>) {
          return py::bytes(std::string(x.str()));
        } else if constexpr (std::is_same_v<T, Value::List>) {
          py::list l;
          for (const auto& e : x) l.append(from_value_py(e));
          return l;
        } else if constexpr (std::is_same_v<T, Value::Dict>) {
          py::dict d;
          for (const auto& [k, e] : x) d[py::str(k)] = from_value_py(e);
          return d;
        } else {
          return py::cast(x);
        }
      },
      v.v);
}

std::vector<Value> values(const py::list& args) {
  std::vector<Value> out;
  out.reserve(args.size());
  for (py::handle a : args) out.push_back(to_value_py(a));
  return out;
}

py::object value_mesh(const ValueMesh<Value>& vm) {
  py::list items;
  for (const auto& [p, v] : vm.items()) items.append(py::make_tuple(point(p), from_value_py(v)));
  return py::make_tuple(shape(vm.shape()), items);
}

std::uint64_t factory_of(const std::string& type) {
  return detail::fnv1a(detail::exposed_key(type));
}

}  // namespace

void bind_exposed(py::module_& m) {
  m.def("spawn_exposed", [](const ProcMesh& p, const std::string& name, const std::string& type,
                            const py::list& args) {
    Body body = encode(values(args));
    return wrap(p.spawn_factory_async<ExposedCall>(name, factory_of(type), std::move(body)),
                [](const Exposed& mesh) { return py::cast(mesh); });
  });

  py::class_<Exposed>(m, "ExposedMesh")
      .def("shape", [](const Exposed& a) { return shape(a.shape()); })
      .def("flatten", &Exposed::flatten)
      .def("split", &Exposed::split)
      .def("rename", &Exposed::rename)
      .def("size", &Exposed::size)
      .def("slice",
           [](const Exposed& a,
              const std::vector<std::tuple<std::string, std::size_t, std::size_t, bool>>& sel) {
             std::vector<DimSelect> out;
             for (const auto& [dim, b, e, index] : sel) {
               if (index) {
                 out.emplace_back(dim, b);
               } else {
                 out.emplace_back(dim, DimSelect::Range{b, e});
               }
             }
             return a.slice(out);
           })
      .def("call",
           [](const Exposed& a, const std::string& endpoint, const py::list& args) {
             return wrap(a.call(&ExposedCall::call, endpoint, values(args)),
                         [](const ValueMesh<Value>& vm) { return value_mesh(vm); });
           })
      .def("call_one",
           [](const Exposed& a, const std::string& endpoint, const py::list& args) {
             return wrap(a.call_one(&ExposedCall::call, endpoint, values(args)),
                         [](const Value& r) { return from_value_py(r); });
           })
      .def("choose",
           [](const Exposed& a, const std::string& endpoint, const py::list& args) {
             return wrap(a.choose(&ExposedCall::call, endpoint, values(args)),
                         [](const Value& r) { return from_value_py(r); });
           })
      .def("broadcast",
           [](const Exposed& a, const std::string& endpoint, const py::list& args) {
             a.broadcast(&ExposedCall::call, endpoint, values(args));
           })
      .def("stop", [](const Exposed& a) { return wrap(a.stop()); })
      .def("to_wire", [](const Exposed& a) { return to_wire(a); })
      .def_static("from_wire", &from_wire<Exposed>);
}

}  // namespace baton::python
