#include "baton/launch/job.hpp"

#include <fstream>

#include "host/hosts.hpp"

namespace baton::job {

HostMesh attach(const std::vector<std::string>& addresses) {
  return internal::attach_hosts(addresses);
}

void save(const HostMesh& hosts, const std::string& path) {
  const std::vector<std::string> addresses = internal::host_addresses(hosts);
  if (addresses.empty()) {
    throw UsageError("job::save: this host has nothing to save (save a HostMesh from attach)");
  }
  std::ofstream out(path, std::ios::trunc);
  for (const auto& a : addresses) out << a << "\n";
  out.close();
  if (!out) throw UsageError("job::save: cannot write " + path);
}

HostMesh attach_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("job::attach_file: cannot read " + path + " (written by job::save)");
  }
  std::vector<std::string> addresses;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.front() != '#') addresses.push_back(line);
  }
  if (addresses.empty()) throw UsageError("job::attach_file: " + path + " names no host");
  return attach(addresses);
}

}  // namespace baton::job
