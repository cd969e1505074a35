// Collectives on CPU through Gloo, and small ones through baton's messages (exchange.hpp); on
// device memory through NCCL/RCCL (nccl.hpp). A group's rendezvous is an actor in the controller
// (rendezvous.hpp); each rank's end of the group, which runs its collectives and breaks the group
// when one fails, is in rank.hpp. Here: making groups, joining them, and which way each
// collective goes.

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>

#include <cstring>
#include <random>
#include <utility>

#include "actor/directory.hpp"
#include "actor/proc_state.hpp"
#include "baton/collective/collective.hpp"
#include "baton/gpu/gpu.hpp"
#include "baton/mesh/mesh.hpp"
#include "collective/rank.hpp"
#include "collective/reduce.hpp"
#include "host/hosts.hpp"

namespace baton::collective {
namespace {

/// The device whose memory `p` is, or -1 for host memory (or no GPU).
int device_of(const void* p) {
  auto& gpu = gpu::api();
  if (!gpu.available()) return -1;
  const gpu::PointerInfo info = gpu.pointer_info(p);
  return info.device ? info.device_index : -1;
}

/// The device both buffers of one collective are on (-1: host); they must agree.
int device_of(const void* in, const void* out, const char* what) {
  const int a = device_of(in);
  const int b = device_of(out);
  if (a != b) {
    throw UsageError(std::string(what) +
                     ": the input and output are in different memories (one on a device, one "
                     "not, or on two devices): put both in the same");
  }
  return a;
}

}  // namespace

Group make_group(const std::vector<ActorId>& members, const std::vector<std::string>& addresses,
                 GroupOptions options) {
  if (members.empty()) throw UsageError("make_group: no members");
  if (members.size() != addresses.size()) {
    throw UsageError("make_group: one address per member");
  }
  Group g;
  g.key = std::random_device{}() * 0x100000000ULL + std::random_device{}();
  g.members = members;
  g.addresses = addresses;
  g.timeout_ms = options.timeout.count();
  g.hosts = internal::reachable_hosts(addresses);  // where each rank's transport listens
  g.store = detail::serving_proc("make_group")
                .spawn<Store>("collective-store-" + std::to_string(g.key))
                .id();
  return g;
}

Group make_group(const ProcMesh& procs, GroupOptions options) {
  std::vector<ActorId> ids;
  std::vector<std::string> addresses;
  for (std::size_t r = 0; r < procs.size(); ++r) {
    ids.push_back(ActorId{procs.proc(r), kAnyActor, 0});
    addresses.push_back(detail::address_text(procs.proc(r)));
  }
  return make_group(ids, addresses, options);
}

Future<void> Communicator::join(const Group& group, Actor& self) {
  int rank = -1;
  for (std::size_t r = 0; r < group.members.size(); ++r) {
    const ActorId& m = group.members[r];
    if (m == self.id() || (m.name == kAnyActor && m.proc == self.id().proc)) {
      rank = static_cast<int>(r);
    }
  }
  if (rank < 0) {
    throw UsageError("collective::join: " + self.id().to_string() +
                     " is not a member of the group (make_group names its members)");
  }
  for (std::size_t r = 0; r < group.members.size(); ++r) {
    detail::remember_address(group.members[r].proc, group.addresses[r]);
  }
  auto impl = std::make_shared<Impl>(group, rank, self);
  Future<void> joined = impl->connect();
  impl_ = std::move(impl);
  return joined;
}

int Communicator::rank() const {
  return impl_ ? impl_->rank : -1;
}
int Communicator::size() const {
  return impl_ ? static_cast<int>(impl_->group.members.size()) : 0;
}

Future<void> Communicator::allreduce_bytes(void* data, std::size_t count, DType type, ReduceOp op,
                                           Keep keep) {
  if (!impl_) throw UsageError("allreduce on a Communicator that joined no group");
  Impl* c = impl_.get();
  if (const int dev = device_of(data); dev >= 0) {
    return c->submit("allreduce", [c, dev, data, count, type, op, keep = std::move(keep)] {
      c->device(dev).allreduce(data, count, type, op);
    });
  }
  if (const Shape shape{Shape::allreduce, static_cast<std::uint8_t>(type),
                        static_cast<std::uint8_t>(op), -1, count * size_of(type)};
      c->can_start_now(shape)) {
    std::function<void()> after;
    if (op == ReduceOp::avg) {
      after = [c, data, count, type] {
        divide(data, count, type, static_cast<int>(c->group.members.size()));
      };
    }
    return c->start_now("allreduce", shape, data, data, std::move(after), std::move(keep));
  }
  return c->submit(
      "allreduce",
      [c, data, count, type, op, keep = std::move(keep)] {
        c->allreduce_host(data, count, type, op);
        if (op == ReduceOp::avg)
          divide(data, count, type, static_cast<int>(c->group.members.size()));
      },
      /*local=*/true);
}

Future<void> Communicator::broadcast_bytes(void* data, std::size_t bytes, int root, Keep keep) {
  if (!impl_) throw UsageError("broadcast on a Communicator that joined no group");
  if (root < 0 || root >= size()) {
    throw UsageError("broadcast: root " + std::to_string(root) + " is not a rank of the group");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(data); dev >= 0) {
    return c->submit("broadcast", [c, dev, data, bytes, root, keep = std::move(keep)] {
      c->device(dev).broadcast(data, bytes, root);
    });
  }
  if (const Shape shape{Shape::broadcast, 0, 0, root, bytes}; c->can_start_now(shape)) {
    return c->start_now("broadcast", shape, data, data, nullptr, std::move(keep));
  }
  return c->submit(
      "broadcast",
      [c, data, bytes, root, keep = std::move(keep)] {
        const Shape shape{Shape::broadcast, 0, 0, root, bytes};
        if (c->small_or_agreed(shape)) {
          return c->small->run(shape, data, data, c->timeout(), c->check_gone());
        }
        gloo::BroadcastOptions o(c->context);
        o.setOutput(static_cast<char*>(data), bytes);
        o.setRoot(root);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::broadcast(o);
      },
      /*local=*/true);
}

Future<void> Communicator::allgather_bytes(const void* in, std::size_t in_bytes, void* out,
                                           std::size_t out_bytes, Keep keep) {
  if (!impl_) throw UsageError("allgather on a Communicator that joined no group");
  if (out_bytes != in_bytes * static_cast<std::size_t>(size())) {
    throw UsageError("allgather: the output must hold size() times the input");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(in, out, "allgather"); dev >= 0) {
    return c->submit("allgather", [c, dev, in, in_bytes, out, keep = std::move(keep)] {
      c->device(dev).allgather(in, in_bytes, out);
    });
  }
  if (const Shape shape{Shape::allgather, 0, 0, -1, in_bytes}; c->can_start_now(shape)) {
    return c->start_now("allgather", shape, in, out, nullptr, std::move(keep));
  }
  return c->submit(
      "allgather",
      [c, in, in_bytes, out, out_bytes, keep = std::move(keep)] {
        const Shape shape{Shape::allgather, 0, 0, -1, in_bytes};
        if (c->small_or_agreed(shape)) {
          return c->small->run(shape, in, out, c->timeout(), c->check_gone());
        }
        gloo::AllgatherOptions o(c->context);
        o.setInput(const_cast<char*>(static_cast<const char*>(in)), in_bytes);
        o.setOutput(static_cast<char*>(out), out_bytes);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::allgather(o);
      },
      /*local=*/true);
}

Future<void> Communicator::reduce_scatter_bytes(const void* in, std::size_t in_count, void* out,
                                                std::size_t out_count, DType type, ReduceOp op,
                                                Keep keep) {
  if (!impl_) throw UsageError("reduce_scatter on a Communicator that joined no group");
  if (in_count != out_count * static_cast<std::size_t>(size())) {
    throw UsageError("reduce_scatter: the input must hold size() blocks of the output's size");
  }
  Impl* c = impl_.get();
  if (const int dev = device_of(in, out, "reduce_scatter"); dev >= 0) {
    return c->submit("reduce_scatter",
                     [c, dev, in, out, out_count, type, op, keep = std::move(keep)] {
                       c->device(dev).reduce_scatter(in, out, out_count, type, op);
                     });
  }
  return c->submit(
      "reduce_scatter",
      [c, in, in_count, out, out_count, type, op, keep = std::move(keep)] {
        // The whole reduced, then this rank's block kept: twice an allreduce's traffic at most.
        const std::size_t width = size_of(type);
        std::vector<char> all(static_cast<const char*>(in),
                              static_cast<const char*>(in) + in_count * width);
        c->allreduce_host(all.data(), in_count, type, op, Shape::reduce_scatter);
        char* mine = all.data() + static_cast<std::size_t>(c->rank) * out_count * width;
        if (op == ReduceOp::avg) {
          divide(mine, out_count, type, static_cast<int>(c->group.members.size()));
        }
        std::memcpy(out, mine, out_count * width);
      },
      /*local=*/true);
}

Future<void> Communicator::barrier() {
  if (!impl_) throw UsageError("barrier on a Communicator that joined no group");
  Impl* c = impl_.get();
  if (c->can_start_now(Shape{})) return c->start_now("barrier", Shape{}, nullptr, nullptr, {}, {});
  return c->submit(
      "barrier",
      [c] {
        if (c->small)
          return c->small->run(Shape{}, nullptr, nullptr, c->timeout(), c->check_gone());
        gloo::BarrierOptions o(c->context);
        o.setTag(c->next_tag++);
        o.setTimeout(c->timeout());
        gloo::barrier(o);
      },
      /*local=*/true);
}

}  // namespace baton::collective
