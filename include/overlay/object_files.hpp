#pragma once
// What a build output's own bytes say about what it was built from: the source files an ELF
// object names in its symbol table, and whether an archive is a thin one (member paths only).
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

// Objects larger than this are not read (nullopt): judging one must stay cheap beside the build.
inline constexpr std::size_t kMaxObjectBytes = 64u << 20;

// The STT_FILE names in the symbol table of a relocatable ELF object (`cc -c a.c` records "a.c"):
// the source it was compiled from. nullopt when `p` is not a readable ELF64 relocatable object
// with a symbol table, or is larger than kMaxObjectBytes.
std::optional<std::vector<std::string>> object_source_files(DiskReader& disk, const fs::path& p);

// A thin archive (`ar csrT`, Meson's default for uninstalled static libraries) holds only the
// paths of its members: its bytes do not change when they do.
bool is_thin_archive(DiskReader& disk, const fs::path& p);

}  // namespace overlay
