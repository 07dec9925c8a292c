#pragma once
// A build's inputs as the build store's key holds them: every path the traced build looked at and
// had not made itself, with what was there before it ran — its type always, and as much more as
// the build looked at: a file's size, mtime and mode (stat: what Make and Ninja decide by), its
// bytes (read or run), a directory's names (listed), a symlink's target (readlink). A build is the
// same build again only where every one of them is as it was; a path the build never looked at
// (a tool on PATH it did not run) does not matter.
//
// Bytes are compared by SHA-256, never by stamps. A digest cache remembers each file's digest
// with its device, inode, size, mtime and ctime (git's index, ccache's and Bazel's digest caches):
// a file whose ctime moved has changed, for nothing can set a ctime back, and an entry is only
// made for a file whose ctime is two seconds older than its hashing, so a write within the
// clock's granularity after the hash cannot pass for the hashed bytes.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/disk.hpp"
#include "overlay/traced_build.hpp"

namespace overlay {

struct BuildInput {
  std::string path;
  Follow follow = Follow::yes;
  unsigned looked = 0;  // Looked bits: what is compared
  FileType type = FileType::none;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  mode_t mode = 0;
  std::string sha256, listing, target;
};
void to_json(nlohmann::json& j, const BuildInput& i);
void from_json(const nlohmann::json& j, BuildInput& i);

class DigestCache {
 public:
  // Entries read from `file` (none where it is missing, unreadable or another user's); an empty
  // path keeps them in memory only.
  DigestCache(Disk& disk, fs::path file);
  // The SHA-256 of the regular file `p`, whose stat (following links) is `fi`.
  std::string sha256(const fs::path& p, const FileInfo& fi);
  // Writes the entries back (whole, by rename) when any was added; a failure is only a cache lost.
  void save();

 private:
  struct Entry {
    std::uint64_t dev = 0, ino = 0, size = 0;
    std::int64_t mtime_ns = 0, ctime_ns = 0;
    std::string sha256;
  };
  Disk& disk_;
  fs::path file_;
  std::map<std::string, Entry> entries_;
  bool dirty_ = false;
};

// The SHA-256 of a directory's names as a build listing it sees them: hidden siblings of ours and
// names below `skipped` left out.
std::string listing_digest(Disk& disk, const fs::path& dir, const std::vector<fs::path>& skipped);

// What a finished trace's inputs were: each file read as it was when the build first looked (the
// digest of its kept bytes where the build then changed it, otherwise of its bytes now, once its
// stat shows nobody changed it meanwhile), and for each program run the ELF interpreter the kernel
// loaded for it. `sources` are the files the entry swapped: their bytes are the recipe's, their
// mtime is new at every apply, so only their type is kept. Returns why the inputs are not known
// ("" when they are): a file another process changed while the build ran.
std::string key_inputs(Disk& disk, const BuildTrace& trace, const fs::path& backups,
                       const std::set<std::string>& sources, DigestCache& digests, std::vector<BuildInput>& out);

// The first input that is not now as recorded, said in a few words ("" when every one is).
std::string first_difference(Disk& disk, const std::vector<BuildInput>& inputs, DigestCache& digests,
                             const std::vector<fs::path>& skipped);

// The SHA-256 of the inputs (the record's name under its recipe).
std::string inputs_digest(const std::vector<BuildInput>& inputs);

}  // namespace overlay
