#pragma once
// What the build really did, observed: a metadata picture (lstat only, no reads) of the build's
// directories taken before and after it, so every file it created or changed that no entry
// tracks is named — the outputs a prediction of the build graph missed, which `revert` would
// otherwise leave holding patched code.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

// Above this many files under the watched dirs the watch is skipped (and says so): its two walks
// must stay small beside the build.
inline constexpr std::size_t kMaxWatchedFiles = 200000;

class BuildWatch {
 public:
  // Pictures every regular file below `dirs` (nested dirs walked once), except `tracked` files
  // and anything below `skipped` dirs (caches, the overlay).
  static BuildWatch start(Disk& disk, std::vector<fs::path> dirs, std::vector<fs::path> tracked,
                          std::vector<fs::path> skipped, std::size_t max_files = kMaxWatchedFiles);
  // The files created or changed (size, inode or mtime) since start(), with their stamps now, and
  // those deleted since ("deleted", with the stamp they had).
  std::vector<UntrackedOutput> finish(Disk& disk);
  // What finish() saw the build do that a watch cannot put back: a file it deleted, a record of its
  // own it rewrote (.ninja_log, .ninja_deps, a depfile). Where any is, revert dates restored files
  // now: nothing proves the install's build has nothing more to redo.
  const std::vector<std::string>& unrestorable() const { return unrestorable_; }
  // Why nothing is watched ("" when the watch is on).
  const std::string& off_reason() const { return off_; }
  // The SHA-256 of the picture finish() took (every watched file's path and stamp), "" when the
  // watch is off: what the build left, so a later look can tell nothing was built since.
  const std::string& after_digest() const { return after_; }
  // The digest a picture taken now would have (as after_digest), "" when it cannot be taken.
  static std::string digest_now(DiskReader& disk, const BuildPicture& recorded);
  // What to record so digest_now can look again: the dirs, tracked files and skipped dirs, and
  // after_digest().
  BuildPicture recorded() const;
  // The picture start() took (empty when the watch is off), and the dirs it walked.
  const std::map<fs::path, FileStamp>& before() const { return seen_; }
  const std::vector<fs::path>& dirs() const { return dirs_; }

 private:
  std::map<fs::path, FileStamp> seen_, records_;
  std::vector<fs::path> dirs_, tracked_, skipped_;
  std::size_t max_files_ = kMaxWatchedFiles;
  std::string off_, after_;
  std::vector<std::string> unrestorable_;
  // The watched files by stamp; `records`, where given, gets the build's own records met on the way.
  std::map<fs::path, FileStamp> picture(DiskReader& disk, std::string& why_off,
                                        std::map<fs::path, FileStamp>* records = nullptr) const;
  static std::string digest(const std::map<fs::path, FileStamp>& files);
};

// The outputs whose file still has the stamp the build left it with (a deleted one: still not
// there): they may hold patched code, or lack a file, until a build regenerates them.
std::vector<UntrackedOutput> still_as_built(DiskReader& disk, const std::vector<UntrackedOutput>& outputs);

// Moves a reverted entry's untracked outputs to the manifest's top level (with the entry and its
// build), keeping there only those still as built.
void keep_untracked_of_reverted(Disk& disk, Manifest& m, const NativeEntry& reverted);

// Why revert must date entry `e` (of `overlay`)'s restored files now ("" when their original
// mtimes may come back): only when every output its build made from the patched sources is
// restored too is the build's view the one before the apply, so that its next run has nothing to
// redo. A traced build: every path it changed still as it left it (or as before), its kept bytes
// there, and nothing it did unobserved. A watched one: the tracked artifacts and caches by the
// revert, no untracked output that may hold patched code, and nothing built in the build's dirs
// since (the watch's picture, taken again, is the same).
std::string why_fresh_times(DiskReader& disk, const NativeEntry& e, const fs::path& overlay);

// Gives `clear_reason` to each output that holds none of the patched code, judged by what the
// build says or the output's own bytes show (anything else "may hold patched code"):
// * an empty file (a marker a script touched);
// * a thin archive: its members' paths only;
// * an ELF object whose symbol table names the source it was compiled from, when that is none of
//   the `patched` files and none of them is a header (a header may be in any object);
// * an output a Ninja edge only relinked against changed shared libraries (tracked artifacts, or
//   outputs judged so): an executable linked against a rebuilt libfoo.so holds none of its code.
//   Asks `ninja -t query` in the nearest ancestor holding build.ninja, at most kMaxRelinkQueries
//   times.
// `changed` are the files the entry swapped or rebuilt; `patched` those it swapped.
// Only the first kMaxJudgedByBytes outputs are read (objects up to kMaxObjectBytes each).
inline constexpr std::size_t kMaxRelinkQueries = 64;
inline constexpr std::size_t kMaxJudgedByBytes = 1024;
void judge_untracked(Disk& disk, std::vector<UntrackedOutput>& outputs, const std::vector<fs::path>& changed,
                     const std::vector<fs::path>& patched);

// Whether the name is a shared library's (libx.so, libx.so.1.2, libx.dylib).
bool is_shared_library_name(const fs::path& p);

// Bookkeeping a build rewrites whatever it builds (.ninja_log, .ninja_deps, a regenerated
// build.ninja, CMake's install_manifest.txt, depfiles, bytecode):
// never reported.
bool is_build_bookkeeping(const fs::path& p);

// The files a build created or changed that no entry tracks, as status, add-native and revert
// write them in JSON: path, change, the entry and its build commands, why one is clear (or null).
nlohmann::json untracked_json(const std::vector<UntrackedOutput>& outputs);

}  // namespace overlay
