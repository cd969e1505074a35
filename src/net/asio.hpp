#pragma once

// Internal: Asio, as every file of this layer includes it. Asio chooses how it allocates its
// handlers' memory (aligned_alloc and free, or operator new and delete) from the standard
// library's configuration, which only a standard header brings in; a file that included Asio
// first would choose the other way, and free with one what another file allocated with the
// other. So a standard header comes first, here, and the choice is checked.

#include <cstddef>

#include <asio.hpp>

#if !defined(ASIO_HAS_STD_ALIGNED_ALLOC)
#error "Asio was configured before the standard library: include net/asio.hpp instead"
#endif
