#pragma once

// Collectives on libtorch tensors (link baton::baton_collective_torch, built where libtorch is):
// the same operations as Communicator's, on contiguous CPU or GPU tensors (GPU ones through
// NCCL/RCCL) of float, double, half, bfloat16 and 8/32/64-bit integers. Each future keeps its
// tensors alive until it completes.

#include <ATen/core/Tensor.h>

#include "baton/collective/collective.hpp"

namespace baton::collective {

/// Every rank's `t` becomes the elementwise `op` of all ranks' `t`.
Future<void> allreduce(Communicator& comm, const at::Tensor& t, ReduceOp op = ReduceOp::sum);
/// Every rank's `t` becomes rank `root`'s.
Future<void> broadcast(Communicator& comm, const at::Tensor& t, int root = 0);
/// `out` (size() times `in`'s elements, of its type) becomes every rank's `in`, in rank order.
Future<void> allgather(Communicator& comm, const at::Tensor& in, const at::Tensor& out);
/// `in` holds size() blocks of `out`'s elements; `out` becomes the `op` of block rank().
Future<void> reduce_scatter(Communicator& comm, const at::Tensor& in, const at::Tensor& out,
                            ReduceOp op = ReduceOp::sum);

}  // namespace baton::collective
