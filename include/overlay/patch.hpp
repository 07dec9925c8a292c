#pragma once
// Applies a unified diff with GNU patch to a private copy, never to the install: a diff that
// does not apply changes nothing and leaves no .orig/.rej anywhere.
#include <filesystem>
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

class PatchedCopy {
 public:
  // Copies `original` into a new private temporary directory and applies `diff` there.
  // Throws Error("patch does not apply to …: <patch's first complaint>") on failure.
  PatchedCopy(Disk& disk, const fs::path& original, const fs::path& diff);
  ~PatchedCopy();
  PatchedCopy(const PatchedCopy&) = delete;
  PatchedCopy& operator=(const PatchedCopy&) = delete;

  const fs::path& file() const { return file_; }

 private:
  Disk& disk_;
  fs::path dir_;
  fs::path file_;
};

}  // namespace overlay
