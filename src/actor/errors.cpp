#include "baton/actor/errors.hpp"

namespace baton {

const char* to_string(UndeliverableError::Reason reason) {
  switch (reason) {
    case UndeliverableError::Reason::unknown_actor:
      return "unknown actor";
    case UndeliverableError::Reason::actor_stopped:
      return "actor stopped";
    case UndeliverableError::Reason::actor_failed:
      return "actor failed";
    case UndeliverableError::Reason::link_lost:
      return "link lost";
    case UndeliverableError::Reason::timeout:
      return "timeout";
  }
  return "unknown reason";
}

}  // namespace baton
