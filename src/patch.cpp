#include "overlay/patch.hpp"

#include <cstdlib>
#include <sstream>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/process.hpp"

namespace overlay {
namespace {

fs::path make_private_dir(Disk& disk) {
  const char* tmp = std::getenv("TMPDIR");
  fs::path base = (tmp && *tmp) ? fs::path(tmp) : fs::path("/tmp");
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path d = base / ("overlay-patch-" + random_hex(6));
    if (disk.make_dir(d, 0700)) return d;
  }
  throw Error("cannot create a private temporary directory under " + base.string());
}

std::string first_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // GNU patch names the hunk that failed on a later line; prefer that one.
    if (line.find("FAILED") != std::string::npos || line.find("garbage") != std::string::npos ||
        line.find("malformed") != std::string::npos || line.find("Reversed") != std::string::npos)
      return line;
    if (last.empty()) last = line;
  }
  return last.empty() ? "no output" : last;
}

}  // namespace

PatchedCopy::PatchedCopy(Disk& disk, const fs::path& original, const fs::path& diff) : disk_(disk) {
  dir_ = make_private_dir(disk);
  try {
    file_ = dir_ / original.filename();
    FileInfo fi = disk.info(original, Follow::yes);
    copy_file_hashing(disk, original, file_, fi.mode, Durable::no);
    RunOptions opts;
    opts.output = Output::capture;
    opts.cwd = dir_;
    RunResult r = run_process({"patch", "--batch", "--forward", "--no-backup-if-mismatch",
                               "--reject-file=-", "--quiet", file_.string(), "-i", diff.string()},
                              opts);
    if (!r.exec_error.empty()) throw Error("cannot run GNU patch: " + r.exec_error);
    if (!r.ok())
      throw Error("patch " + diff.string() + " does not apply to " + original.string() + ": " +
                  first_line(r.out + "\n" + r.err));
  } catch (...) {
    remove_tree(disk_, dir_);
    throw;
  }
}

PatchedCopy::~PatchedCopy() {
  try {
    remove_tree(disk_, dir_);
  } catch (const std::exception&) {
    // A leftover private temp dir is harmless; never throw from a destructor.
  }
}

}  // namespace overlay
