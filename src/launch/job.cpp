#include "baton/launch/job.hpp"

#include <fstream>

#include "host/hosts.hpp"

namespace baton::job {

HostMesh attach(const std::vector<std::string>& addresses) {
  return internal::attach_hosts(Runtime::get(), addresses);
}

void save(const HostMesh& hosts, const std::string& path) {
  const std::vector<std::string> addresses = internal::host_addresses(hosts);
  if (addresses.empty()) {
    throw UsageError("save: this host has nothing to save (save the hosts of a job or of attach)");
  }
  std::ofstream out(path, std::ios::trunc);
  for (const auto& a : addresses) out << a << "\n";
  out.close();
  if (!out)
    throw UsageError("save: cannot write " + path + " (is its directory there and writable?)");
}

HostMesh attach_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("attach_file: cannot read " + path + " (a hosts file is written by save)");
  }
  std::vector<std::string> addresses;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.front() != '#') addresses.push_back(line);
  }
  if (addresses.empty())
    throw UsageError("attach_file: " + path + " names no host (a hosts file is written by save)");
  return attach(addresses);
}

}  // namespace baton::job
