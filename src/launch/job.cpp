#include "baton/launch/job.hpp"

#include "host/hosts.hpp"

namespace baton::job {

HostMesh attach(const std::vector<std::string>& addresses) {
  return internal::attach_hosts(addresses);
}

}  // namespace baton::job
