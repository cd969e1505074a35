#pragma once

// Internal: how a message from this process to a proc travels now (for the layers above that
// report it, as the tensor store's stats do).

#include <string>

#include "baton/wire/ids.hpp"

namespace baton::detail {

/// "in-process" (a proc of this process), the kind of the link to proc `id` ("shm", "unix",
/// "tcp", "tls"), or, before any link is made, the kind its address gives ("unix", "tcp").
std::string path_to(const ProcId& id);

}  // namespace baton::detail
