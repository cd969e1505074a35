// What every transfer's parts share: how a failure is explained to the user.

#include "rdma/transfer.hpp"
#include "baton/actor/errors.hpp"
#include "rdma/ucx.hpp"

namespace baton::rdma_detail {

/// The reason a call to the owner's rdma actor failed, for a user.
std::string reason(const std::exception_ptr& e, const RdmaBuffer& buffer) {
  try {
    std::rethrow_exception(e);
  } catch (const ActorError& a) {
    return a.remote_message();
  } catch (const SupervisionError& s) {
    return "the owner " + detail::owner_of(buffer).id().to_string() + " is gone (" + s.what() +
           "); its memory is lost: register it again in a live proc";
  } catch (const std::exception& x) {
    return "the owner " + detail::owner_of(buffer).id().to_string() +
           " cannot be reached: " + x.what();
  }
}

bool dropped(const std::string& error) {
  return error.find("was dropped") != std::string::npos;
}

/// Forgets what this process cached for a buffer that turned out dropped.
void forget_cached(RdmaState& state, const RdmaBuffer::Descriptor& d) {
  if (d.device) {
    IpcCache::get().forget(d);
  } else if (!d.ucx_worker.empty()) {
    if (auto* u = state.ucx()) u->forget(d.ucx_worker, d.rkey);
  }
}

/// Reports the end of a part of `op`; a failure is explained by the owner if it is gone (a UCX
/// or IPC error says little about why), else the part's own error stands.
void part_done(const TransferPtr& op, const RdmaBuffer& b, bool guarded, const std::string& error) {
  if (error.empty()) return op->done(guarded);
  when_done(detail::owner_of(b).call(&RdmaAgent::check, b.descriptor().id, 0, 0), b,
            [op, guarded, error](const std::string& owner) {
              op->done(guarded, owner.empty() || dropped(owner) ? error : owner);
            });
}

}  // namespace baton::rdma_detail
