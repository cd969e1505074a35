#pragma once

// The whole public API of baton.

#include "baton/actor/actor.hpp"
#include "baton/actor/actor_ref.hpp"
#include "baton/actor/errors.hpp"
#include "baton/actor/executor.hpp"
#include "baton/actor/future.hpp"
#include "baton/actor/port.hpp"
#include "baton/actor/proc.hpp"
#include "baton/actor/task.hpp"
#include "baton/gpu/gpu.hpp"
#include "baton/host/runtime.hpp"
#include "baton/launch/job.hpp"
#include "baton/mesh/mesh.hpp"
#include "baton/rdma/rdma.hpp"
#include "baton/slice/slice.hpp"
#include "baton/store/store.hpp"
#include "baton/wire/address.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/envelope.hpp"
#include "baton/wire/ids.hpp"
