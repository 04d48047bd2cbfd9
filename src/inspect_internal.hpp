// inspect_internal.hpp — the snapshot logic of inspect() on an already validated view, and on an
// in-memory image of a control segment (the fuzz targets and the hostile-input tests use it).
//
// Not part of the public API: tools and tests see shared memory through ipcring::inspect().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ipcring/inspect.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// Takes a snapshot of a mapped control segment whose header was validated (view.geo is the
// process-local geometry). Probes leases only after checking that the lease bytes look like a
// robust process-shared mutex made by this C library; anything else is reported in
// Snapshot::problems and counted as dead, never passed to pthread_mutex_trylock.
Snapshot snapshot_view(const SegmentView& view, std::string_view name, std::uint32_t owner_uid,
                       std::uint32_t mode);

// inspect() on an image of a control segment in process memory: `size` bytes at `base`, which
// must be aligned to kLine (128). Checks magic and the header exactly as open_segment does
// (validate_header on a private copy), then runs snapshot_view on it. Throws Error with
// Errc::version_mismatch, corrupt_segment, not_ready (magic 0) or invalid_argument (misaligned
// base); any other outcome is a Snapshot. The image may be modified by lease probes (a dead
// owner's robust mutex is made consistent and unlocked), as a live segment would be.
Snapshot inspect_image(unsigned char* base, std::size_t size, std::string_view name);

}  // namespace ipcring::detail
