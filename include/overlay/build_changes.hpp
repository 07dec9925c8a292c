#pragma once
// What an entry's traced build changed beyond the entry's items, as the manifest records it
// (BuildChange), and the way back: every such path returned to the state it had before the build —
// bytes, mode, owner and mtime — so that, with the entry's items restored too, the install's build
// sees exactly what it saw before the apply (docs/design.md, "The build, observed").
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/manifest.hpp"
#include "overlay/traced_build.hpp"

namespace overlay {

class BackupPaths;
class BackupStore;

// The changes of a finished trace, as the manifest records them: each with how the build left it,
// its backup (in `backups`) named relative to the overlay as `backups_rel`/NAME. A path the build
// made and removed again, the items add-native tracks itself and a file whose bytes were not kept
// (the trace says why) are left out.
std::vector<BuildChange> build_changes_of(Disk& disk, const std::vector<TracedChange>& changes, const fs::path& backups,
                                          const std::string& backups_rel);

// Why the changes cannot all go back ("" when they can): the first path that holds neither what
// the build left there nor what was there before (another build or a hand changed it since), or
// whose kept bytes are missing.
// Each change whose path is not now as it was before the build (its type, owner, mode, size,
// mtime, a file's extended attributes), as "path: how it differs": what status counts as not
// original, so a revert that could not put one back is never called clean.
std::vector<std::string> changes_not_as_before(DiskReader& disk, const std::vector<BuildChange>& changes);

std::string why_not_restorable(DiskReader& disk, const BackupPaths& store, const std::vector<BuildChange>& changes);

// One path put back, or why it could not be.
struct ChangeRestored {
  std::string path;
  // "restore", "remove", "unchanged"; for one of Ninja's logs left as it is, "forget" (the records
  // of the outputs put back dropped) or "discard" (removed whole); "keep" for a directory the build
  // made where nothing was that holds what the build did not make; "" when it was not put back.
  std::string action;
  std::string problem;
  bool left = false;  // not a failure: changed since the build by someone else, so left as it is
  std::string note;   // what the report says of it besides (a directory kept, an mtime not ours to set)
};

// Puts every change back (or says what it would do: `dry_run`): directories the build removed
// first, then files and symlinks (each with its original bytes, mode, owner and mtime), then the
// directories it made (deepest first, only where empty), then the mode and mtime of directories
// that were there. A path changed since the build is left as it is and named; where that is one
// of Ninja's logs, the records of the outputs put back go from it ("forget"), so Ninja remakes them.
// `items` are the entry's own outputs the revert puts back besides (its artifacts): their records
// go from a log left as it is too.
std::vector<ChangeRestored> restore_build_changes(Disk& disk, BackupStore& store,
                                                  const std::vector<BuildChange>& changes, bool dry_run,
                                                  const std::vector<fs::path>& items = {});

// The first path the entry's build read (as its traces in `build_dir` recorded it) that is no
// longer as that build found it — its type, a file's size or mtime: what the install's build
// compares — other than what the build changed or the entry tracks; "" when none is (or no trace
// is there). With it, even an install put back exactly has work for its next build.
std::string input_changed_since(Disk& disk, const fs::path& build_dir);

// The backups the changes name (relative to the overlay), for forgetting them.
std::vector<std::string> backups_of(const std::vector<BuildChange>& changes);

}  // namespace overlay
