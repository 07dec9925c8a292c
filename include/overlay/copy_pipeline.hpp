#pragma once
// The copy/hash pipeline: every byte read once, hashed and (optionally) written, reading,
// hashing and writing on their own threads for large files; small files in one buffer.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

enum class Durable { no, yes };

// Copies src to a new file dest (which must not exist) with `mode`, hashing the bytes as they
// are copied: every byte is read once. Where the filesystem shares blocks (FICLONE: XFS with
// reflink, btrfs), a large file is cloned instead and only read to hash it. With Durable::yes,
// dest is fsynced before returning. Returns the SHA-256 (hex) of the bytes dest holds.
std::string copy_file_hashing(Disk& disk, const fs::path& src, const fs::path& dest, mode_t mode,
                              Durable durable);

// SHA-256 (hex) of a file's contents, streamed.
std::string hash_file(Disk& disk, const fs::path& p);

}  // namespace overlay
