// Host addresses (see hosts.hpp): looking a host up, the name of an agent's proc, and which of
// this host's addresses its peers can reach.
#include "host/hosts.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <stdexcept>

namespace baton::internal {

/// The numeric address of `host` (itself if it is one already); throws naming `what` if it
/// cannot be looked up.
std::string resolve_host(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw std::runtime_error("attach: cannot look up the host of " + what + ": " +
                             ::gai_strerror(rc));
  }
  char text[INET6_ADDRSTRLEN] = {};
  // IPv4 first: an agent advertises one unless told otherwise.
  const addrinfo* pick = found;
  for (const addrinfo* i = found; i != nullptr; i = i->ai_next) {
    if (i->ai_family == AF_INET) {
      pick = i;
      break;
    }
  }
  if (pick->ai_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr, text,
                sizeof text);
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr, text,
                sizeof text);
  }
  ::freeaddrinfo(found);
  return text;
}

std::string agent_name(const Address& address) {
  std::string host;
  for (char c : address.host) {
    host += (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-') ? c : '_';
  }
  return "host-" + host + "-" + std::to_string(address.port);
}

/// This host's address on the route to `peer` (an IPv4 address): no packet is sent.
std::string route_address(const std::string& peer) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  if (::inet_pton(AF_INET, peer.c_str(), &to.sin_addr) != 1) return {};
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  std::string found;
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &me.sin_addr, text, sizeof text) != nullptr) found = text;
  }
  ::close(fd);
  return found;
}

/// The first IPv4 address of interface `name` (or of any interface that is up and not
/// loopback, when `name` is empty); empty if there is none.
std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!name.empty() && name != i->ifa_name) continue;
    if (name.empty() && ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0)) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

std::vector<std::string> reachable_hosts(const std::vector<std::string>& addresses) {
  std::vector<Address> parsed;
  parsed.reserve(addresses.size());
  std::string remote;
  for (const auto& a : addresses) {
    parsed.push_back(Address::parse(a));
    if (parsed.back().transport == Address::Transport::tcp) remote = parsed.back().host;
  }
  const std::string here = remote.empty() ? "127.0.0.1" : route_address(remote);
  std::vector<std::string> out;
  out.reserve(parsed.size());
  for (const auto& a : parsed)
    out.push_back(a.transport == Address::Transport::tcp ? a.host : here);
  return out;
}

}  // namespace baton::internal
