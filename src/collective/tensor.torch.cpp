// Collectives on libtorch tensors: the tensor's storage as a span of its element type, handed to
// the Communicator; the only translation unit of the collectives that includes libtorch.

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "baton/collective/tensor.hpp"

namespace baton::collective {
namespace {

/// Throws UsageError unless `t` is a contiguous tensor on the CPU or a GPU (CUDA, or ROCm, which
/// libtorch calls CUDA too): `what` names the argument.
void check(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw UsageError(std::string(what) + ": an undefined tensor");
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw UsageError(std::string(what) + ": a tensor on " + t.device().str() +
                     "; collectives move CPU and GPU (CUDA/ROCm) tensors: move it (.cpu())");
  }
  if (!t.is_contiguous()) {
    throw UsageError(std::string(what) + ": a tensor that is not contiguous (.contiguous())");
  }
}

/// The element type of `t`, as collectives know it.
DType dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::f32;
    case at::kDouble:
      return DType::f64;
    case at::kHalf:
      return DType::f16;
    case at::kBFloat16:
      return DType::bf16;
    case at::kChar:
      return DType::i8;
    case at::kByte:
      return DType::u8;
    case at::kInt:
      return DType::i32;
    case at::kLong:
      return DType::i64;
    default:
      throw UsageError(std::string("collectives do not move tensors of ") +
                       c10::toString(t.scalar_type()));
  }
}

/// What holds the tensors until a collective on them is over.
std::shared_ptr<const void> hold(std::vector<at::Tensor> tensors) {
  return std::make_shared<const std::vector<at::Tensor>>(std::move(tensors));
}

/// Throws UsageError unless `in` and `out` have one element type.
void same_type(const at::Tensor& in, const at::Tensor& out, const char* what) {
  if (in.scalar_type() != out.scalar_type()) {
    throw UsageError(std::string(what) + ": the input and output tensors differ in type");
  }
}

}  // namespace

struct TensorAccess {
  static Future<void> allreduce(Communicator& comm, const at::Tensor& t, ReduceOp op) {
    check(t, "allreduce");
    return comm.allreduce_bytes(t.data_ptr(), static_cast<std::size_t>(t.numel()), dtype(t), op,
                                hold({t}));
  }
  static Future<void> broadcast(Communicator& comm, const at::Tensor& t, int root) {
    check(t, "broadcast");
    return comm.broadcast_bytes(t.data_ptr(), t.nbytes(), root, hold({t}));
  }
  static Future<void> allgather(Communicator& comm, const at::Tensor& in, const at::Tensor& out) {
    check(in, "allgather");
    check(out, "allgather");
    same_type(in, out, "allgather");
    return comm.allgather_bytes(in.data_ptr(), in.nbytes(), out.data_ptr(), out.nbytes(),
                                hold({in, out}));
  }
  static Future<void> reduce_scatter(Communicator& comm, const at::Tensor& in,
                                     const at::Tensor& out, ReduceOp op) {
    check(in, "reduce_scatter");
    check(out, "reduce_scatter");
    same_type(in, out, "reduce_scatter");
    return comm.reduce_scatter_bytes(in.data_ptr(), static_cast<std::size_t>(in.numel()),
                                     out.data_ptr(), static_cast<std::size_t>(out.numel()),
                                     dtype(out), op, hold({in, out}));
  }
};

Future<void> allreduce(Communicator& comm, const at::Tensor& t, ReduceOp op) {
  return TensorAccess::allreduce(comm, t, op);
}
Future<void> broadcast(Communicator& comm, const at::Tensor& t, int root) {
  return TensorAccess::broadcast(comm, t, root);
}
Future<void> allgather(Communicator& comm, const at::Tensor& in, const at::Tensor& out) {
  return TensorAccess::allgather(comm, in, out);
}
Future<void> reduce_scatter(Communicator& comm, const at::Tensor& in, const at::Tensor& out,
                            ReduceOp op) {
  return TensorAccess::reduce_scatter(comm, in, out, op);
}

}  // namespace baton::collective
