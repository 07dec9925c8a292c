#pragma once
// Ninja's two logs, read record by record: `.ninja_log` (a line per command run: start, end, the
// output's mtime, its path, the command's hash) and `.ninja_deps` (binary: path records, then each
// output's dependencies with its mtime). Ninja trusts both over the files: a restat rule's output
// is judged by the mtime the log recorded, and an output's dependencies by its deps record while
// the file is not newer. A revert that puts outputs back but cannot put the logs back with them
// drops their records here, so that Ninja remakes each: never less work than the truth needs.
#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

// Whether `p` is one of Ninja's logs by its name (`.ninja_log`, `.ninja_deps`).
bool is_ninja_log(const fs::path& p);

// Ninja's log or deps log (`bytes`, read from `log`) without its records of `outputs`, and how
// many went. Names in it are relative to the log's directory, or absolute; each is compared as
// `spell` gives it (the caller's spelling of `outputs`: a build dir reached through a symlink is
// named both ways). nullopt where it is not a file this reads record by record: another format, or
// a version Ninja no longer reads.
struct NinjaLogEdit {
  std::string bytes;
  std::size_t dropped = 0;
};
using Spelling = std::function<fs::path(const fs::path&)>;
std::optional<NinjaLogEdit> without_records(const fs::path& log, const std::string& bytes,
                                            const std::set<fs::path>& outputs, const Spelling& spell = {});

}  // namespace overlay
