#include "overlay/native_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/holds.hpp"
#include "overlay/manifest.hpp"
#include "overlay/patch.hpp"
#include "overlay/trust.hpp"
#include "overlay/words.hpp"

namespace overlay {
namespace {

// An existing, readable regular file (symlinks resolved); `what` names it in errors.
fs::path existing_file(Disk& disk, const fs::path& p, const std::string& what) {
  FileInfo fi = disk.info(p, Follow::yes);
  if (!fi.exists()) throw Error(what + " does not exist: " + p.string());
  if (fi.type == FileType::directory) throw Error(what + " is a directory: " + p.string());
  if (fi.type != FileType::regular) throw Error(what + " is not a regular file: " + p.string());
  try {
    disk.open_read(p);
  } catch (const DiskError& e) {
    throw Error(what + " is not readable: " + p.string() + " (" + std::strerror(e.code()) + ")");
  }
  return disk.real_path(p);
}

bool inside(const fs::path& child, const fs::path& parent) {
  auto rel = child.lexically_relative(parent);
  return !rel.empty() && *rel.begin() != "..";
}

void check_overlay_dir(Disk& disk, const fs::path& overlay, bool trust_owner) {
  FileInfo fi = disk.info(overlay, Follow::yes);
  if (fi.exists() && fi.type != FileType::directory) throw Error("overlay is not a directory: " + overlay.string());
  if (fi.exists()) load_manifest(disk, overlay);  // a malformed manifest is refused up front
  refuse_unrevertable(disk, overlay, trust_owner);
}

// --over LOWER: another overlay than this one; one that does not exist yet is a plain add.
fs::path checked_lower(Disk& disk, ManifestCache& records, const fs::path& lower, const fs::path& overlay) {
  if (lower == overlay) throw Error("--over names this overlay itself: " + lower.string());
  FileInfo fi = disk.info(lower, Follow::yes), oi = disk.info(overlay, Follow::yes);
  if (fi.exists() && fi.type != FileType::directory) throw Error("--over: not an overlay directory: " + lower.string());
  if (fi.exists() && oi.exists() && fi.dev == oi.dev && fi.ino == oi.ino)
    throw Error("--over names this overlay itself: " + lower.string() + " is " + overlay.string());
  if (fi.exists() && records.unreadable(lower)) throw ManifestError(records.why_unreadable(lower));  // up front
  return lower;
}

std::vector<fs::path> checked_artifacts(Disk& disk, const AddNativeRequest& req) {
  std::vector<fs::path> out;
  for (const auto& a : req.artifacts) {
    fs::path p = absolute_normal(a);
    FileInfo fi = disk.info(p, Follow::no);
    if (fi.type == FileType::directory) throw Error("artifact is a directory: " + p.string());
    if (fi.exists() && fi.type != FileType::regular) throw Error("artifact is not a regular file: " + p.string());
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

std::vector<fs::path> checked_caches(Disk& disk, const AddNativeRequest& req, const fs::path& overlay) {
  std::vector<fs::path> out;
  for (const auto& c : req.caches) {
    fs::path p = absolute_normal(c);
    FileInfo fi = disk.info(p, Follow::no);
    if (fi.exists() && fi.type != FileType::directory) throw Error("cache dir is not a directory: " + p.string());
    if (p == p.root_path() || p == overlay || inside(overlay, p) || inside(p, overlay))
      throw Error("cache dir overlaps the overlay or the root: " + p.string());
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// p, once checked to be an existing directory (symlinks followed); `what` names it in errors.
fs::path existing_dir(Disk& disk, const fs::path& p, const std::string& what) {
  FileInfo fi = disk.info(p, Follow::yes);
  if (!fi.exists()) throw Error(what + " does not exist: " + p.string());
  if (fi.type != FileType::directory) throw Error(what + " is not a directory: " + p.string());
  return p;
}

NativePlan::Swap tree_swap(Disk& disk, const PatchedTree::Change& c) {
  NativePlan::Swap s;
  switch (c.change) {
    case FileChange::modified:
      s.kind = SwapKind::modify;
      break;
    case FileChange::created:
      s.kind = SwapKind::create;
      break;
    case FileChange::deleted:
      s.kind = SwapKind::remove;
      break;
  }
  s.target = s.kind == SwapKind::create ? disk.real_path(c.path.parent_path()) / c.path.filename()
                                        : existing_file(disk, c.path, "file the diff changes");
  if (s.kind == SwapKind::remove) return s;
  s.content = c.content;
  s.content_mode = disk.info(c.content, Follow::no).mode;
  s.content_sha256 = hash_file(disk, s.content);
  return s;
}

// --patch-root: every file the diff names, modified, created or deleted as one entry.
std::vector<NativePlan::Swap> tree_swaps(Disk& disk, const AddNativeRequest& req, NativePlan& plan) {
  if (!req.patch) throw Error("--patch-root needs --patch");
  if (!req.targets.empty() || !req.patched_files.empty())
    throw Error("--patch-root takes no --target or --patched-file: the diff names the files");
  fs::path root = disk.real_path(existing_dir(disk, absolute_normal(*req.patch_root), "patch root"));
  fs::path diff = existing_file(disk, absolute_normal(*req.patch), "patch file");
  plan.patched_tree = std::make_shared<PatchedTree>(disk, root, diff, req.strip);
  std::vector<NativePlan::Swap> swaps;
  for (const auto& c : plan.patched_tree->changes()) {
    NativePlan::Swap s = tree_swap(disk, c);
    // A directory under the root that is a symlink must not carry the change elsewhere.
    if (!inside(s.target, root))
      throw Error("file the diff changes leads out of the patch root through a symlink: " + c.path.string() + " is " +
                  s.target.string());
    if (inside(s.target, plan.overlay))
      throw Error("file the diff changes lies inside the overlay: " + s.target.string());
    for (const auto& other : swaps)
      if (other.target == s.target) throw Error("diff reaches one file by two names: " + s.target.string());
    swaps.push_back(std::move(s));
  }
  return swaps;
}

// Changes given whole (replay): each target checked as a diff's would be.
std::vector<NativePlan::Swap> given_swaps(Disk& disk, const AddNativeRequest& req, const NativePlan& plan) {
  if (!req.targets.empty() || !req.patched_files.empty() || req.patch || req.patch_root)
    throw Error("changes given whole take no --target, --patched-file or --patch");
  std::vector<NativePlan::Swap> swaps;
  for (const auto& c : req.changes) {
    NativePlan::Swap s;
    s.kind = c.kind;
    fs::path target = absolute_normal(c.target);
    if (c.kind == SwapKind::create) {
      if (disk.info(target, Follow::no).exists()) throw Error("file to create already exists: " + target.string());
      s.target = disk.real_path(existing_dir(disk, target.parent_path(), "directory of the file to create")) /
                 target.filename();
    } else {
      s.target = existing_file(disk, target, "file to change");
    }
    if (inside(s.target, plan.overlay)) throw Error("file to change lies inside the overlay: " + s.target.string());
    for (const auto& other : swaps)
      if (other.target == s.target) throw Error("file changed twice: " + s.target.string());
    if (c.kind != SwapKind::remove) {
      s.content = existing_file(disk, absolute_normal(c.content), "new content");
      s.content_mode = disk.info(s.content, Follow::no).mode;
      s.content_sha256 = hash_file(disk, s.content);
    }
    swaps.push_back(std::move(s));
  }
  return swaps;
}

std::vector<NativePlan::Swap> checked_swaps(Disk& disk, const AddNativeRequest& req, NativePlan& plan) {
  if (!req.changes.empty()) return given_swaps(disk, req, plan);
  if (req.patch_root) return tree_swaps(disk, req, plan);
  if (req.targets.empty()) throw Error("no --target given (or --patch with --patch-root)");
  if (req.patch && (req.targets.size() != 1 || !req.patched_files.empty()))
    throw Error("--patch takes exactly one --target and no --patched-file");
  if (!req.patch && req.patched_files.size() != req.targets.size())
    throw Error("each --target needs one --patched-file (or give --patch)");
  std::vector<NativePlan::Swap> swaps;
  for (std::size_t i = 0; i < req.targets.size(); ++i) {
    NativePlan::Swap s;
    s.target = existing_file(disk, absolute_normal(req.targets[i]), "target source");
    for (const auto& other : swaps)
      if (other.target == s.target) throw Error("target given twice: " + s.target.string());
    if (req.patch) {
      fs::path diff = existing_file(disk, absolute_normal(*req.patch), "patch file");
      auto copy = std::make_shared<PatchedCopy>(disk, s.target, diff);
      s.content = copy->file();
      plan.patched.push_back(copy);
    } else {
      s.content = existing_file(disk, absolute_normal(req.patched_files[i]), "patched file");
    }
    if (inside(s.target, plan.overlay)) throw Error("target source lies inside the overlay: " + s.target.string());
    s.content_sha256 = hash_file(disk, s.content);
    swaps.push_back(std::move(s));
  }
  return swaps;
}

std::vector<std::vector<std::string>> checked_build(Disk& disk, const AddNativeRequest& req, fs::path& cwd) {
  std::vector<std::vector<std::string>> cmds;
  for (const auto& line : req.build_cmds) {
    auto argv = split_words(line);
    if (argv.empty()) throw Error("--build-cmd is empty");
    cmds.push_back(std::move(argv));
  }
  cwd = existing_dir(disk, absolute_normal(req.build_cwd.value_or(fs::current_path())), "build cwd");
  return cmds;
}

std::vector<CacheWay> cache_decisions(Disk& disk, const std::vector<fs::path>& caches, CacheSnapshot how) {
  std::vector<CacheWay> out;
  for (const auto& c : caches) {
    FileInfo ci = disk.info(c, Follow::no);
    if (!ci.exists() || how == CacheSnapshot::tar) {
      out.push_back(how == CacheSnapshot::tar ? CacheWay::tar : CacheWay::aside);  // nothing to keep when absent
      continue;
    }
    std::string why = why_not_renamable(disk, c, ci);
    // `move` renames the cache as `aside` does, beside itself: moved into the overlay it brought
    // its symlinks and bytecode under a root that a source-proving launch refuses on PYTHONPATH
    // (issue 62), and aside costs the same one rename, on the cache's own filesystem.
    if ((how == CacheSnapshot::move || how == CacheSnapshot::aside) && !why.empty())
      throw Error(std::string("--cache-snapshot ") + (how == CacheSnapshot::move ? "move" : "aside") +
                  ": cannot rename " + c.string() + ": " + why);
    out.push_back(why.empty() ? CacheWay::aside : CacheWay::tar);
  }
  return out;
}

// Every directory the swap, the build's artifacts or a cache's invalidation will write in is
// writable now (a read-only mount, a directory of another user): refused before any hold or
// entry exists, instead of failing half-way through the swap.
void check_writable(Disk& disk, const NativePlan& plan) {
  std::vector<std::pair<fs::path, std::string>> dirs;
  for (const auto& s : plan.swaps) dirs.emplace_back(s.target.parent_path(), "the directory of " + s.target.string());
  for (const auto& a : plan.artifacts) dirs.emplace_back(a.parent_path(), "the directory of artifact " + a.string());
  // A cache is emptied in place where its parent cannot be written (CacheWay::tar): the cache
  // itself must be writable, its parent need not.
  for (const auto& c : plan.caches) dirs.emplace_back(c, "cache dir " + c.string());
  for (const auto& [dir, what] : dirs) {
    if (!disk.info(dir, Follow::yes).exists()) continue;  // made by the build, or reported elsewhere
    if (!disk.can_write(dir))
      throw Error("cannot write the install: " + what + " is read-only or not writable by this user (uid " +
                  std::to_string(::geteuid()) + ")");
  }
}
// The install's real name of p: symlinks resolved where p (or its directory) exists.
fs::path real_or_same(Disk& disk, const fs::path& p) {
  if (disk.info(p, Follow::yes).exists()) return disk.real_path(p);
  if (disk.info(p.parent_path(), Follow::yes).type == FileType::directory)
    return disk.real_path(p.parent_path()) / p.filename();
  return p;
}

// An artifact that is a file the entry changes (a target, or a patched file the caller keeps),
// or a cache dir holding one of them or the overlay: verify would judge the swap as the build's
// work, and invalidating the cache would move the patched source (or the overlay) away. Refused.
void check_no_overlap(Disk& disk, const NativePlan& plan) {
  std::vector<std::pair<fs::path, std::string>> changed;  // what must stay where it is, and its name
  for (const auto& s : plan.swaps) {
    changed.emplace_back(s.target, "target " + s.target.string());
    if (!s.content.empty()) changed.emplace_back(real_or_same(disk, s.content), "patched file " + s.content.string());
  }
  for (const auto& a : plan.artifacts) {
    fs::path real = real_or_same(disk, a);
    for (const auto& [p, what] : changed)
      if (real == p || a == p)
        throw Error("artifact " + a.string() + " is the " + what + ": an artifact is what the build makes");
  }
  changed.emplace_back(disk.info(plan.overlay, Follow::yes).exists() ? disk.real_path(plan.overlay) : plan.overlay,
                       "overlay " + plan.overlay.string());
  for (const auto& c : plan.caches) {
    fs::path real = real_or_same(disk, c);
    for (const auto& [p, what] : changed)
      for (const auto& dir : {c, real})
        if (p == dir || inside(p, dir))
          throw Error("cache dir " + c.string() + " holds the " + what + ": invalidating it would move that away");
  }
}
}  // namespace

NativePlan plan_add_native(Disk& disk, const AddNativeRequest& req) {
  NativePlan plan;
  plan.overlay = absolute_normal(req.overlay);
  plan.lock_timeout = req.lock_timeout;
  plan.build_timeout = req.build_timeout;
  plan.force = req.force;
  plan.rebuild = req.rebuild;
  plan.state_dir = req.state_dir.empty() ? HoldRegistry::default_state_dir() : req.state_dir;
  check_overlay_dir(disk, plan.overlay, req.trust_owner);
  plan.records = std::make_shared<ManifestCache>(disk);
  if (req.over) plan.over = checked_lower(disk, *plan.records, absolute_normal(*req.over), plan.overlay);
  plan.artifacts = checked_artifacts(disk, req);
  plan.caches = checked_caches(disk, req, plan.overlay);
  plan.cache_ways = cache_decisions(disk, plan.caches, req.cache_snapshot);
  plan.build_cmds = checked_build(disk, req, plan.build_cwd);
  if (req.build_cwd) plan.watched_dirs.push_back(plan.build_cwd);
  plan.build_cwd_defaulted = !req.build_cwd;
  if (req.owner_pid) {
    plan.owner = local_owner(*req.owner_pid);
    if (!plan.owner) throw Error("owner pid " + std::to_string(*req.owner_pid) + " is not a running process");
  }
  if (req.owner) plan.owner = req.owner;
  plan.patch_id = req.patch_id;
  plan.entry_id = req.entry_id;
  plan.swaps = checked_swaps(disk, req, plan);
  check_no_overlap(disk, plan);
  check_writable(disk, plan);
  return plan;
}
const char* to_string(SwapKind k) {
  switch (k) {
    case SwapKind::modify:
      return "modify";
    case SwapKind::create:
      return "create";
    case SwapKind::remove:
      return "delete";
  }
  return "?";
}
}  // namespace overlay
