#pragma once
// libarchive, bound on first use (dlopen) instead of at start-up. Loading libarchive and what it
// pulls in (libxml2, ICU, compressors: ten libraries) costs every invocation ~4 ms, while only
// tar snapshots need it; the A/B cycle target (25 ms for three invocations) cannot afford that.
// The prototypes are libarchive's own (decltype of its declarations), so calls stay type-checked.
#include <archive.h>
#include <archive_entry.h>

namespace overlay {

// One X per libarchive function, packed; clang-format 14 re-indents such a list on every run.
// clang-format off
#define OVERLAY_ARCHIVE_FUNCTIONS(X)                                                                  \
  X(archive_entry_filetype) X(archive_entry_free) X(archive_entry_hardlink) X(archive_entry_mtime)      \
  X(archive_entry_mtime_nsec) X(archive_entry_new) X(archive_entry_pathname) X(archive_entry_perm)      \
  X(archive_entry_set_gid) X(archive_entry_set_mode) X(archive_entry_set_mtime)                         \
  X(archive_entry_set_pathname) X(archive_entry_set_size) X(archive_entry_set_symlink)                  \
  X(archive_entry_set_uid) X(archive_entry_symlink) X(archive_error_string) X(archive_free)             \
  X(archive_read_data_block) X(archive_read_new) X(archive_read_next_header) X(archive_read_open)       \
  X(archive_read_support_filter_all) X(archive_read_support_format_tar) X(archive_write_close)          \
  X(archive_write_data) X(archive_write_header) X(archive_write_new) X(archive_write_open)              \
  X(archive_write_set_bytes_in_last_block) X(archive_write_set_bytes_per_block)                         \
  X(archive_write_set_format_option) X(archive_write_set_format_pax_restricted)
// clang-format on

struct ArchiveApi {
#define OVERLAY_ARCHIVE_POINTER(name) decltype(&::name) name = nullptr;
  OVERLAY_ARCHIVE_FUNCTIONS(OVERLAY_ARCHIVE_POINTER)
#undef OVERLAY_ARCHIVE_POINTER
};

// The loaded library (once per process); throws Error naming what is missing.
const ArchiveApi& archive_api();

}  // namespace overlay
