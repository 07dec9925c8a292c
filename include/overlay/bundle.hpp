#pragma once
// export and replay: an overlay's native changes as a bundle another install takes back. The
// optimisation loop's finalize exports the accepted overlay and reverts it (the install pristine
// again); a fresh install gets the changes back with `replay`.
//
// A bundle is a directory: bundle.json (docs/manifest.md, "Bundles") and files/<entry>/<path>,
// the patched bytes of every file an entry modifies or creates. Paths are relative to the install
// root (or "~/…": under the home directory); the only absolute path in it is the root it was made
// on, the default for replay. Build commands carry "{root}" and "{home}" where those were. It
// holds no backups: each file's pristine and patched SHA-256 say what it was made from and what
// it puts there, and replay refuses an install whose file holds other bytes than that pristine.
#include <optional>
#include <string>
#include <vector>

#include "overlay/disk.hpp"
#include "overlay/native_build.hpp"
#include "overlay/native_plan.hpp"
#include "overlay/native_verify.hpp"

namespace overlay {

inline constexpr const char* kBundleFile = "bundle.json";
inline constexpr int kBundleVersion = 1;

struct BundleFile {
  std::string path;  // relative to the root, or "~/…"
  SwapKind change = SwapKind::modify;
  std::string pristine_sha256;  // "" where it did not exist (create)
  std::string patched_sha256;   // "" where the change deletes it
  std::string file;             // the patched bytes in the bundle ("" for a delete)
};

struct BundleEntry {
  std::string from_entry;               // the exported overlay's entry id: replay gives its entry the same one
  std::optional<std::string> patch_id;  // the exported entry's patch (apply, a fleet step): kept too
  std::vector<BundleFile> files;
  std::vector<std::string> artifacts;  // relative, as files
  std::vector<std::string> caches;
  std::vector<std::vector<std::string>> build_cmds;  // with "{root}" and "{home}"
  std::optional<std::string> build_cwd;              // relative, as files
};

struct Bundle {
  fs::path dir;   // where it was read from
  fs::path root;  // the install root it was made on
  std::vector<BundleEntry> entries;
};

struct ExportReport {
  fs::path out, root;
  std::size_t entries = 0, files = 0;
  std::vector<std::string> notes;  // what the bundle leaves out, and why (a build dir nobody named)
};

// Writes `overlay`'s native changes as a bundle at `out` (a new directory, made whole under a
// temporary name and renamed in). Every file must hold the bytes its top change put there (a
// layer above, a hand edit: refused, naming the file). `root` defaults to the deepest directory
// holding every path outside the home directory. Throws Error; nothing written then.
ExportReport export_bundle(Disk& disk, const fs::path& overlay, const fs::path& out,
                           const std::optional<fs::path>& root);

// Reads and strictly validates a bundle (every path relative and inside, every digest hex, every
// patched file present with its digest).
Bundle read_bundle(Disk& disk, const fs::path& dir);

struct ReplayRequest {
  fs::path bundle;
  std::optional<fs::path> root;  // default: the bundle's
  AddNativeRequest base;         // the overlay and the build's handling; the changes come from the bundle
  bool revert_on_failure = false;
  bool dry_run = false;
};

struct ReplayedEntry {
  AppliedEntry applied;
  BuildOutcome build;
  std::size_t files = 0;
};

struct ReplayReport {
  fs::path root;
  std::vector<ReplayedEntry> entries;  // applied, in order; the last one's build may have failed
  std::size_t checked_files = 0;       // files found holding the bundle's pristine bytes
  std::optional<VerifyReport> verify;  // once every build succeeded
  bool reverted = false;               // revert_on_failure undid what it had applied
  bool ok() const;
};

// Checks that every file of the bundle holds its pristine bytes under `root` (refusing, naming the
// first that does not: a reinstall or another version, and changing nothing), then applies the
// bundle's entries (add-native's protocol; consecutive ones built the same way and changing no file
// twice as one entry, so that their build runs once), runs each one's build, and verifies.
// A build that fails stops it; with revert_on_failure, every entry it applied is reverted.
ReplayReport replay_bundle(Disk& disk, const ReplayRequest& req);

}  // namespace overlay
