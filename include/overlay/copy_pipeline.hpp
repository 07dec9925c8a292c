#pragma once
// The copy/hash pipeline: every byte read once, hashed and (optionally) written, reading,
// hashing and writing on their own threads for large files; small files in one buffer.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

enum class Durable { no, yes };

// Copies src to a new file dest (which must not exist) with `mode` and returns the SHA-256 (hex)
// of the bytes dest holds. A large file is cloned where the filesystem shares blocks (FICLONE:
// XFS with reflink, btrfs), else copied by the kernel (copy_file_range) while this process hashes
// the source, else streamed through here (read once, hashed and written); the source's hash is
// used only if it provably did not change meanwhile. With Durable::yes, dest is fsynced.
std::string copy_file_hashing(Disk& disk, const fs::path& src, const fs::path& dest, mode_t mode,
                              Durable durable);

// SHA-256 (hex) of a file's contents, streamed.
std::string hash_file(Disk& disk, const fs::path& p);

}  // namespace overlay
