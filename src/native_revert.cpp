#include "overlay/native_revert.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include <spdlog/spdlog.h>

#include "overlay/build_changes.hpp"
#include "overlay/build_watch.hpp"
#include "overlay/engagement.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/fold.hpp"
#include "overlay/holds.hpp"
#include "overlay/in_flight.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/ninja_logs.hpp"
#include "overlay/pinned.hpp"
#include "overlay/stack.hpp"
#include "overlay/store.hpp"
#include "overlay/traced_build.hpp"

namespace overlay {
namespace {

// Another process's operation on the overlay (an add-native building, an exec running its legs):
// its change is being made, and undoing it under it would leave that run verifying, and running,
// what it did not build (found by a probe: `revert --with-layers` under an `exec --over` building,
// then `FRESH_BUILD_OK (checked 0)` and the candidate run on the stock build). Refused, nothing
// changed; a killed operation's mark is stale at once. (gc-stale skips such an overlay before.)
void refuse_while_in_flight(Disk& disk, const fs::path& overlay) {
  auto live = live_operations(disk, overlay);
  // Another revert is no change being made: reverts take turns under the overlay lock.
  std::erase_if(live, [](const LiveOperation& op) { return op.ours || op.op == "revert"; });
  if (!live.empty())
    throw Error("overlay " + overlay.string() + ": " + describe_live(live) +
                " on it; revert it once that ends (or stop that process: its mark goes with it)");
}

// The installed files an entry changes: its sources, the files it created, its artifacts.
std::vector<fs::path> installed_paths(const NativeEntry& e) {
  std::vector<fs::path> paths;
  for (const auto& s : e.sources) paths.emplace_back(s.install_path);
  for (const auto& c : e.created) paths.emplace_back(c.path);
  for (const auto& a : e.artifacts) paths.emplace_back(a.path);
  return paths;
}

// The holds of the state dir the options name (the default one when they name none).
HoldRegistry holds_of(Disk& disk, const RevertOptions& opts) {
  return HoldRegistry(disk, opts.state_dir.empty() ? HoldRegistry::default_state_dir() : opts.state_dir);
}

// A path the entry's build changed that someone else changed since (revert left it): it may hold
// what the candidate's build made, so it stays on record, as an untracked output, until rebuilt.
// Ninja's own logs hold records of builds, never code: nothing patched to warn of.
void keep_left_changes(Disk& disk, Manifest& m, const NativeEntry& e, const std::vector<std::string>& left) {
  for (const auto& p : left) {
    if (is_ninja_log(p)) continue;
    FileInfo fi = disk.info(p, Follow::no);
    if (fi.type != FileType::regular) continue;
    std::erase_if(m.untracked, [&](const UntrackedOutput& u) { return u.path == p; });
    m.untracked.push_back({p, "changed", stamp_of(fi), e.id, e.build_cmds, ""});
  }
}

// The entries revert_natives is asked for.
bool selected(const RevertOptions& opts, const NativeEntry& e) {
  return (!opts.only_entry || e.id == *opts.only_entry) && (!opts.only_patch || e.patch_id == opts.only_patch);
}

class Reverter {
 public:
  Reverter(Disk& disk, const fs::path& overlay, const RevertOptions& opts, RevertReport& report)
      : disk_(disk), store_(disk, overlay), opts_(opts), report_(report), lowers_(disk) {}
  bool original_times_ = false;  // the entry being reverted gets its files' original mtimes back
  std::vector<std::string> left_;

  // Restores one entry; true when every item is back at its original state. Each item is acted
  // on under the directory add-native pinned for it, or refused when that no longer stands.
  bool revert_entry(const NativeEntry& e) {
    bool ok = true;
    std::string why = why_fresh_times(disk_, e, store_.overlay());  // judged before anything is put back
    original_times_ = why.empty();
    report_.times.push_back({e.id, original_times_, why, {}, {}});
    if (original_times_)
      for (const auto& u : still_as_built(disk_, e.untracked)) report_.times.back().rewritten.push_back(u.path);
    for (auto it = e.caches.rbegin(); it != e.caches.rend(); ++it)
      ok &= attempt(it->dir, [&] {
        PinnedPlace at = place(it->dir, it->parent);
        return cache_reverted_under(it->layer, it->dir) ? std::string("unchanged") : cache(*it, at);
      });
    ok &= build_changes(e);
    for (auto it = e.artifacts.rbegin(); it != e.artifacts.rend(); ++it)
      ok &= attempt(it->path, [&] {
        PinnedPlace at = place(it->path, it->parent);
        return reverted_under(it->layer, it->path, at, std::nullopt) ? std::string("unchanged") : artifact(*it, at);
      });
    for (auto it = e.created.rbegin(); it != e.created.rend(); ++it)
      ok &= attempt(it->path, [&] {
        PinnedPlace at = place(it->path, it->parent);
        return reverted_under(it->layer, it->path, at, it->sha256) ? std::string("unchanged") : created(at);
      });
    for (auto it = e.sources.rbegin(); it != e.sources.rend(); ++it)
      ok &= attempt(it->install_path, [&] {
        // Where it goes first: a refusal there is the item's one story, with no warning before it
        // about a replacement that then does not happen.
        PinnedPlace at = place(it->install_path, it->parent);
        if (reverted_under(it->layer, it->install_path, at,
                           it->deleted ? std::optional<std::string>("") : it->patched_sha256))
          return std::string("unchanged");
        if (!opts_.dry_run && vanished_above.count(it->install_path) == 0) warn_if_drifted(*it);
        return file(at, *it, original_times_ ? RestoredTime::original : RestoredTime::now);
      });
    if (ok && original_times_ && !opts_.dry_run) note_changed_since(e);
    return ok;
  }

  // Everything the entry's build read, its own changes and items put back, is as that build found
  // it — or the first path that is not: the install's next build has that to redo.
  void note_changed_since(const NativeEntry& e) {
    if (e.id.empty()) return;
    try {
      report_.times.back().changed_since =
          input_changed_since(disk_, store_.resolve(std::string(kBackupDirName) + "/" + e.id + "/build"));
    } catch (const Error& err) {
      (void)err;  // no build dir of ours to read: nothing is claimed of the build's inputs
    }
  }

  // Why entry `e` of `m` cannot be reverted yet (nothing when it can): an entry made after it with --force (in
  // this manifest, or in the overlay that holds the path now) backed up the very bytes `e` patched
  // a source to. Reverted first, `e` would put the original back only for that entry's revert to
  // put `e`'s patch back over it, with nothing left on record to say so.
  std::optional<RevertProblem> stacked_over(const Manifest& m, const NativeEntry& e) {
    // A later entry of this overlay that rebuilt one of its artifacts again keeps this entry's
    // build as its backup: reverted first, this one would leave that entry to put it back.
    auto later = std::find_if(m.natives.begin(), m.natives.end(), [&](const NativeEntry& x) { return &x == &e; });
    for (auto x = later == m.natives.end() ? later : later + 1; x != m.natives.end(); ++x) {
      if (opts_.dry_run && selected(opts_, *x)) continue;  // a dry run forgets nothing: that one would go first
      for (const auto& a : e.artifacts)
        if (std::any_of(x->artifacts.begin(), x->artifacts.end(),
                        [&](const ArtifactItem& b) { return b.path == a.path; }))
          return RevertProblem{a.path, "rebuilt again by entry " + x->id + " of this overlay; revert that entry first"};
    }
    if (auto rebuilt = rebuilt_by_another(e)) return rebuilt;
    for (const auto& s : e.sources) {
      if (!s.patched_sha256) continue;
      auto stacks = [&](const NativeEntry& x) {
        return &x != &e && std::any_of(x.sources.begin(), x.sources.end(), [&](const SourceItem& y) {
          return y.install_path == s.install_path && y.sha256 == *s.patched_sha256;
        });
      };
      for (const auto& x : m.natives)
        if (stacks(x))
          return RevertProblem{s.install_path, "patched again over this entry by entry " + x.id +
                                                   " of this overlay (--force); revert that entry first"};
      auto other = holds().holder(s.install_path);
      if (!other || absolute_normal(*other) == store_.overlay()) continue;
      std::optional<Manifest> om;
      try {
        om = load_manifest(disk_, *other);
      } catch (const Error&) {
        continue;  // an unreadable record stacks nothing we can name
      }
      if (om && std::any_of(om->natives.begin(), om->natives.end(), stacks))
        return RevertProblem{s.install_path, "patched again over this entry by overlay " + other->string() +
                                                 " (add-native --force); revert that overlay first"};
    }
    return std::nullopt;
  }

  // An artifact of `e` that another overlay's build rewrote after `e`'s and still holds that build
  // (its entry recorded the file as it left it): that build compiled this entry's patched sources
  // beside its own, and restoring the original under it would leave the other overlay's patch
  // live with an artifact built without it, which its verify could not see.
  std::optional<RevertProblem> rebuilt_by_another(const NativeEntry& e) {
    std::vector<std::pair<std::string, FileStamp>> now;
    for (const auto& a : e.artifacts)
      if (FileInfo fi = disk_.info(a.path, Follow::no); fi.type == FileType::regular)
        now.emplace_back(a.path, stamp_of(fi));
    if (now.empty()) return std::nullopt;
    HoldRegistry reg = holds();
    for (const auto& other : reg.overlays()) {
      if (absolute_normal(other) == store_.overlay()) continue;
      std::optional<Manifest> om;
      try {
        om = load_manifest(disk_, other);
      } catch (const Error& err) {
        spdlog::debug("revert: the record of {} is unreadable ({}): it names no rebuild", other.string(), err.what());
        continue;
      }
      for (const auto& x : om ? om->natives : std::vector<NativeEntry>{})
        for (const auto& c : x.build_changes)
          for (const auto& [path, stamp] : now)
            if (c.path == path && c.left == FileType::regular && c.stamp == stamp)
              return RevertProblem{path, "rebuilt since by the build of entry " + x.id + " of overlay " +
                                             other.string() + ", which still holds it; revert that overlay first"};
    }
    return std::nullopt;
  }

  // What a revert did to one of Ninja's logs left as it is (build_changes.hpp), in a note.
  std::string ninja_log_note(const ChangeRestored& r) const {
    const std::string will = opts_.dry_run ? " would be " : " ";
    if (r.action == "forget")
      return r.path + ": its records of the outputs put back" + will +
             "dropped, so that the install's build remakes them";
    return r.path + will + "removed, as it could not be read record by record: the install's build starts over";
  }
  // What the entry's traced build changed beyond its items goes back (build_changes.hpp); a path
  // changed since by someone else is left, noted, and kept on record as an untracked output.
  bool build_changes(const NativeEntry& e) {
    bool ok = true;
    left_.clear();
    std::vector<fs::path> artifacts;
    for (const auto& a : e.artifacts) artifacts.emplace_back(a.path);
    for (const auto& r : restore_build_changes(disk_, store_, changes_of(e), opts_.dry_run, artifacts)) {
      if (r.left) {
        left_.push_back(r.path);
        report_.notes.push_back(r.path + ": " + r.problem);
      } else if (!r.problem.empty()) {
        report_.problems.push_back({r.path, r.problem});
        ok = false;
      } else {
        report_.actions.push_back({r.action, r.path});
        spdlog::info("{}{} {}", opts_.dry_run ? "would " : "", r.action, r.path);
        if (r.action == "forget" || r.action == "discard") report_.notes.push_back(ninja_log_note(r));
        if (r.action == "keep")
          report_.notes.push_back(r.path + ": a directory the build made, kept: it holds what the build did not make");
        if (!r.note.empty()) report_.notes.push_back(r.path + ": " + r.note);
      }
    }
    return ok;
  }
  // The entry's build changes: as recorded; or, where its build never recorded them (killed, or
  // its record lost to a full disk), as far as its journals got: a serve's first, then each build
  // command's in order; a path's first line says what it was before, its last whether it was only
  // appended to (a log outside the entry's directories is then left as it is).
  std::vector<BuildChange> changes_of(const NativeEntry& e) {
    if (e.build_traced || e.id.empty()) return e.build_changes;
    std::string rel = std::string(kBackupDirName) + "/" + e.id + "/build";
    fs::path dir;
    try {
      dir = store_.resolve(rel);
    } catch (const Error& err) {
      (void)err;  // no build dir of ours: nothing was journaled
      return {};
    }
    if (disk_.info(dir, Follow::no).type != FileType::directory) return {};
    std::vector<std::string> journals;
    for (const auto& f : disk_.list_dir(dir))
      if (f.name.size() > 8 && f.name.compare(f.name.size() - 8, 8, ".journal") == 0) journals.push_back(f.name);
    auto order = [](const std::string& n) {  // "s-…" (a serve) first, then "c<k>-…" by k
      return n[0] == 's' ? -1L : std::strtol(n.c_str() + 1, nullptr, 10);
    };
    std::sort(journals.begin(), journals.end(),
              [&](const std::string& a, const std::string& b) { return order(a) < order(b); });
    std::vector<TracedChange> journaled;
    for (const auto& name : journals)
      for (auto& c : read_journal(disk_, dir / name.substr(0, name.size() - 8))) {
        auto same =
            std::find_if(journaled.begin(), journaled.end(), [&](const TracedChange& x) { return x.path == c.path; });
        if (same == journaled.end())
          journaled.push_back(std::move(c));
        else
          same->appended = same->appended && c.appended;
      }
    std::vector<fs::path> dirs;  // the entry's own: what an appended file there is part of
    for (const auto& p : installed_paths(e)) dirs.push_back(p.parent_path());
    if (e.build_cwd) dirs.emplace_back(*e.build_cwd);
    std::erase_if(journaled, [&](const TracedChange& c) {
      return c.appended &&
             std::none_of(dirs.begin(), dirs.end(), [&](const fs::path& d) { return is_within(fs::path(c.path), d); });
    });
    if (!journaled.empty())
      report_.notes.push_back("entry " + e.id + ": its build ended before it recorded what it changed; the " +
                              std::to_string(journaled.size()) + " change(s) its journal holds are put back");
    return build_changes_of(disk_, journaled, dir, rel);
  }

  // The paths of the last entry's build changes that were left as someone else changed them.
  const std::vector<std::string>& left() const { return left_; }

  void forget_backups(const NativeEntry& e) {
    std::vector<std::string> rels = backups_of(e.build_changes);
    if (!e.id.empty()) rels.push_back(std::string(kBackupDirName) + "/" + e.id + "/build");
    for (const auto& s : e.sources) {
      rels.push_back(s.backup);
      if (s.same_inode) rels.push_back(*s.same_inode);
    }
    for (const auto& a : e.artifacts) {
      if (a.existed) rels.push_back(a.backup);
      if (a.same_inode) rels.push_back(*a.same_inode);
    }
    for (const auto& c : e.caches) {
      if (c.backup_tar) rels.push_back(*c.backup_tar);
      if (c.backup_dir) rels.push_back(*c.backup_dir);
    }
    if (e.python_guard) rels.push_back(e.python_guard->stop);
    for (const auto& rel : rels) {
      try {
        store_.forget(rel);
      } catch (const Error& err) {
        report_.problems.push_back({rel, std::string("cannot delete backup: ") + err.what()});
      }
    }
  }

 private:
  template <typename F>
  bool attempt(const std::string& path, F&& step) {
    try {
      report_.actions.push_back({step(), path});
      spdlog::info("{}{} {}", opts_.dry_run ? "would " : "", report_.actions.back().action, path);
      return true;
    } catch (const std::exception& err) {
      report_.problems.push_back({path, err.what()});
      return false;
    }
  }

  HoldRegistry holds() { return holds_of(disk_, opts_); }

  // A layered cache dir whose lower overlay was reverted under this layer (its record no longer
  // tracks the dir): the lower put the cache as it was before the stack back; this layer's
  // snapshot is the lower's build of it, which must not come back. Left as it is, said in a note.
  bool cache_reverted_under(const std::optional<LayerRef>& layer, const std::string& dir) {
    if (!layer || lower_state(lowers_, *layer, dir) != RefState::stale) return false;
    report_.notes.push_back(dir + ": the layer below (" + layer->overlay +
                            ") was reverted under this one; its cache stays as that revert left it");
    return true;
  }

  // A layered item (add-native --over) whose lower overlay no longer holds the file.
  // * The file holds the pristine bytes: nothing of the stack is there; left as it is.
  // * The lower vanished (deleted or moved): its backups are not here; its bytes, which this
  //   layer's backup holds, go back (all there is), and a note says the original is with it.
  // * The lower was reverted under this layer (its record no longer names the file: reverted
  //   while this layer was moved away, or by a tool that knows no layers): putting its bytes back
  //   would bring back a change it reverted. Where the file holds other bytes since (an install
  //   update, another overlay's patch), they are left as they are; where it still holds this
  //   layer's own bytes, nothing on record says what goes there: refused, naming the original.
  bool reverted_under(const std::optional<LayerRef>& layer, const std::string& path, const PinnedPlace& at,
                      const std::optional<std::string>& ours) {
    if (!layer) return false;
    RefState st = lower_state(lowers_, *layer, path);
    if (st == RefState::live || st == RefState::unreadable) return false;
    FileInfo fi = disk_.info(at.at(), Follow::no);
    std::optional<std::string> now = !fi.exists() ? std::optional<std::string>("")
                                     : fi.type == FileType::regular
                                         ? std::optional<std::string>(hash_file(disk_, at.at()))
                                         : std::nullopt;
    const std::string below = "the layer below (" + layer->overlay + ", entry " + layer->entry + ")";
    if (now == layer->pristine_sha256) {
      report_.notes.push_back(path + ": " + below + " no longer records it; the file already holds its pristine bytes");
      return true;
    }
    if (st == RefState::vanished) {
      if (!opts_.dry_run)
        report_.notes.push_back(path + ": " + below +
                                " has vanished (deleted or moved): the file gets back that layer's bytes; "
                                "its original is with that overlay wherever it is now, or lost with it");
      return false;
    }
    if (ours && now == *ours)
      throw Error(
          below +
          " was reverted under this layer, whose change is still in place: its bytes would bring back a change it "
          "reverted, and the original (sha256 " +
          (layer->pristine_sha256.empty() ? std::string("none: absent") : layer->pristine_sha256.substr(0, 16)) +
          ") is not on record here; put it back by hand, then revert again");
    report_.notes.push_back(path + ": " + below +
                            " was reverted under this one and the file has changed since: left as it is");
    return true;
  }

  // A source that holds neither the bytes add-native wrote nor the original was changed since by
  // someone else: its change is about to be replaced by the original, which is said, never silent.
  void warn_if_drifted(const SourceItem& s) {
    if (!s.patched_sha256) return;
    FileInfo fi = disk_.info(s.install_path, Follow::no);
    if (fi.type != FileType::regular) return;
    std::string now = hash_file(disk_, s.install_path);
    if (now == *s.patched_sha256 || now == s.sha256) return;
    spdlog::warn(
        "{} changed since add-native patched it (sha256 {}, neither the patched bytes nor the original): "
        "the change is replaced by the original",
        s.install_path, now.substr(0, 16));
  }

  // Where a file item is written: through its pinned directory, held open (a dry run only
  // reads, by path, after the same check).
  PinnedPlace place(const std::string& path, const std::optional<PinnedDir>& parent) {
    if (opts_.dry_run) return PinnedPlace{nullptr, pinned_path(disk_, path, parent)};
    return open_pinned(disk_, path, parent);
  }

  std::string file(const PinnedPlace& p, const FileBackup& rec, RestoredTime when) {
    if (opts_.dry_run) return dry_file(p.path, rec.backup, rec.sha256);
    return store_.restore_file(rec, p.at(), when) ? "restore" : "unchanged";
  }

  std::string dry_file(const std::string& path, const std::string& rel, const std::string& sha) {
    FileInfo fi = disk_.info(path, Follow::no);
    if (fi.type == FileType::regular && hash_file(disk_, path) == sha) return "unchanged";
    if (!disk_.info(store_.resolve(rel), Follow::no).exists()) throw Error("backup missing: " + rel);
    return "restore";
  }

  std::string artifact(const ArtifactItem& a, const PinnedPlace& p) {
    // A build output goes back with its original mtime where every output of the build is
    // restored, else a second older than now: the sources restored after it (now) are then
    // strictly newer even in whole seconds. Either way an add-native right after this revert
    // finds no artifact of the current second to wait out (design.md, "The mtimes revert gives").
    if (a.existed) return file(p, a, original_times_ ? RestoredTime::original : RestoredTime::previous_second);
    return created(p);
  }

  // A file that did not exist before the entry: removed, whatever it holds now.
  std::string created(const PinnedPlace& p) {
    const At path = p.at();
    // A crash while the entry was creating it leaves its hidden temp sibling; nothing else would
    // ever remove that from the install.
    if (!opts_.dry_run) store_.tidy(path);
    FileInfo fi = disk_.info(path, Follow::no);
    if (!fi.exists()) return "unchanged";
    if (fi.type == FileType::directory) throw Error("a directory now stands where the entry created a file");
    if (!opts_.dry_run) remove_file_durably(disk_, path);
    return "remove";
  }

  // A cache dir: its renames made through its pinned parent, held open (a tar is still
  // extracted by path; only its final swap is made through the held directory when renamable).
  std::string cache(const CacheItem& item, const PinnedPlace& p) {
    CacheItem c = item;  // with its dir (and its aside copy, a sibling) where they are now
    c.dir = p.path.string();
    if (c.aside) c.aside->path = (p.path.parent_path() / fs::path(c.aside->path).filename()).string();
    const At at = p.at();
    if (!c.existed) {
      bool present = disk_.info(at, Follow::no).exists();
      if (!opts_.dry_run) store_.discard_dir(at);
      return present ? "remove" : "unchanged";
    }
    if (c.backup_dir) return moved_cache(c, at);
    if (c.aside) return aside_cache(c, at);
    if (opts_.dry_run) {
      if (!disk_.info(store_.resolve(*c.backup_tar), Follow::no).exists())
        throw Error("backup missing: " + *c.backup_tar);
      return "restore";
    }
    store_.restore_dir(*c.backup_tar, c.sha256, at);
    return "restore";
  }

  // A cache moved into the overlay goes back by rename. No moved dir: it was never moved (a crash
  // before the move) or was moved back already; either way the cache dir must be in place.
  std::string moved_cache(const CacheItem& c, const At& at) {
    bool present = disk_.info(store_.resolve(*c.backup_dir), Follow::no).exists();
    if (!present) {
      if (disk_.info(c.dir, Follow::no).type != FileType::directory)
        throw Error("moved cache missing: " + *c.backup_dir);
      if (!opts_.dry_run) store_.tidy_dir(c.dir);  // the trash of an interrupted move back
      return "unchanged";
    }
    if (!opts_.dry_run) store_.move_dir_back(*c.backup_dir, at);
    return "restore";
  }

  // A cache renamed aside beside itself goes back by rename, once proven to be the very directory
  // recorded (device, inode, owner); refused otherwise, the entry kept.
  std::string aside_cache(const CacheItem& c, const At& at) {
    if (!opts_.dry_run) return store_.take_back_aside(*c.aside, at) ? "restore" : "unchanged";
    FileInfo di = disk_.info(c.dir, Follow::no);
    if (di.type == FileType::directory && di.ino == c.aside->ino && di.dev == c.aside->dev) return "unchanged";
    if (!disk_.info(c.aside->path, Follow::no).exists()) throw Error("aside copy missing: " + c.aside->path);
    return "restore";
  }

  Disk& disk_;
  BackupStore store_;
  const RevertOptions& opts_;
  RevertReport& report_;
  ManifestCache lowers_;

 public:
  // Files a vanished layer above changed (its bytes give way to the originals, said in a note).
  std::set<std::string> vanished_above;
  BackupStore& store() { return store_; }
};

// The litter still on disk (a purge killed, or still at work): kept on the record until gone.
std::vector<std::string> litter_left(Disk& disk, const std::vector<std::string>& litter) {
  std::vector<std::string> left;
  for (const auto& l : litter)
    if (disk.info(l, Follow::no).exists()) left.push_back(l);
  return left;
}

// Holds are a convenience for the next add-native; a failure to drop one never fails a revert
// (a stale hold is ignored once no manifest records the change).
void release_holds(Disk& disk, const RevertOptions& opts, const fs::path& overlay, const NativeEntry& e,
                   const Manifest& now) {
  std::vector<fs::path> paths = installed_paths(e);
  try {
    HoldRegistry holds = holds_of(disk, opts);
    holds.release(paths, overlay, now, opts.lock_timeout, &e);
    holds.forget_caches(e.id);
  } catch (const Error& err) {
    spdlog::warn("cannot release holds of {}: {}", overlay.string(), err.what());
  }
}

// Deletes the patched module files of removed Python entries (never anything outside the overlay).
void remove_module_files(Disk& disk, const fs::path& overlay, const std::vector<std::string>& files,
                         RevertReport& report) {
  for (const auto& rel : files) {
    try {
      if (!is_safe_relative(rel)) throw Error("module file escapes the overlay: " + rel);
      if (disk.info(overlay / rel, Follow::no).exists()) remove_file_durably(disk, overlay / rel);
    } catch (const Error& err) {
      spdlog::warn("cannot delete {}: {}", rel, err.what());
    }
    ++report.modules_removed;
  }
}

// Backups no record names (an add-native killed before it saved its record, a revert killed
// after it forgot an entry) go, the overlay lock held, so no add-native is between the two.
void sweep_partial_backups(Disk& disk, const fs::path& overlay, const Manifest& m, RevertReport& report) {
  for (const auto& id : BackupStore(disk, overlay).sweep_unnamed_entries(m)) {
    spdlog::warn("removed {}: the backups of an add-native interrupted before its record",
                 (overlay / kBackupDirName / id).string());
    report.partial_backups_swept.push_back(id);
  }
}

std::set<std::string> selected_paths(const Manifest& m, const RevertOptions& opts) {
  std::set<std::string> out;
  for (const auto& e : m.natives)
    if (selected(opts, e))
      for (auto& p : tracked_paths(e)) out.insert(std::move(p));
  return out;
}

std::string layer_name(const UpperRef& u) { return u.overlay + " [" + u.entry + "]"; }

// --with-layers: each live layer stacked on the entries asked for goes first, newest first (its
// own layers before it, by the same call).
void unwind_layers(Disk& disk, const fs::path& overlay, const RevertOptions& opts, RevertReport& report) {
  std::optional<Manifest> m;
  try {
    m = load_manifest(disk, overlay);
  } catch (const Error&) {
    return;  // the revert itself says why
  }
  if (!m) return;
  ManifestCache cache(disk);
  std::set<std::string> paths = selected_paths(*m, opts);
  auto ups = uppers_of(cache, *m);
  for (auto it = ups.rbegin(); it != ups.rend(); ++it) {
    const auto& seen = opts.unwinding;
    if (!it->blocks() || !stacks_on(it->ref, paths) ||
        std::find(seen.begin(), seen.end(), it->ref.overlay) != seen.end())
      continue;
    RevertOptions up = opts;
    up.only_entry = it->ref.entry;
    up.only_patch.reset();
    up.unwinding.push_back(overlay.string());
    RevertReport r = revert_natives(disk, it->ref.overlay, up);
    for (auto& p : r.problems) report.problems.push_back({p.path, "layer " + layer_name(it->ref) + ": " + p.reason});
    report.actions.insert(report.actions.end(), r.actions.begin(), r.actions.end());
    report.notes.insert(report.notes.end(), r.notes.begin(), r.notes.end());
    report.layers_reverted.insert(report.layers_reverted.end(), r.layers_reverted.begin(), r.layers_reverted.end());
    if (r.ok() && r.entries_reverted > 0) report.layers_reverted.push_back(layer_name(it->ref));
  }
}

// A live layer stacked on one of the files asked for refuses the whole revert, before anything
// changes: reverted first, this overlay would put the pristine bytes back under that layer, whose
// own revert would then put this overlay's change back with nothing on record to say so. A layer
// that vanished (deleted or moved) refuses nothing: its bytes give way to the originals.
bool refused_under_layers(const std::vector<Upper>& ups, const Manifest& m, const RevertOptions& opts,
                          RevertReport& report) {
  std::set<std::string> paths = selected_paths(m, opts), ids;
  for (const auto& e : m.natives)
    if (selected(opts, e)) ids.insert(e.id);
  for (const auto& u : ups) {
    // A layer stands on the entries its items name (where its record could be read); an entry of
    // ours stacked on top of it with --force is not under it.
    bool under = u.on_entries.empty() ? stacks_on(u.ref, paths)
                                      : std::any_of(u.on_entries.begin(), u.on_entries.end(),
                                                    [&](const std::string& id) { return ids.count(id) != 0; });
    if (!under) continue;
    std::string at = u.ref.paths.front();
    if (u.blocks()) {
      report.blocked_by.push_back(layer_name(u.ref));
      report.problems.push_back({at, "layer " + layer_name(u.ref) + " is stacked on this overlay's change" +
                                         (u.state == RefState::unreadable ? " (its record cannot be read)" : "") +
                                         ": revert it first, or revert this overlay with --with-layers"});
    } else if (u.state == RefState::vanished) {
      report.notes.push_back(at + ": the layer above (" + layer_name(u.ref) +
                             ") has vanished (deleted or moved): its bytes give way to the originals");
    }
  }
  return !report.blocked_by.empty();
}

// The entries of `overlay` a live layer stands on (as revert_natives would find them now).
std::set<std::string> entries_under_layers(Disk& disk, const fs::path& overlay) {
  std::set<std::string> out;
  // An unreadable record names no layer: the revert that reads it next says why.
  best_effort("no entry is known to stand under a layer", [&] {
    auto m = load_manifest(disk, overlay);
    ManifestCache cache(disk);
    for (const auto& u : m ? uppers_of(cache, *m) : std::vector<Upper>{})
      if (u.blocks()) out.insert(u.on_entries.begin(), u.on_entries.end());
  });
  return out;
}

void merge_report(RevertReport& into, RevertReport&& r) {
  into.had_manifest = into.had_manifest || r.had_manifest;
  into.entries = std::max(into.entries, r.entries);
  into.entries_reverted += r.entries_reverted;
  into.modules_removed += r.modules_removed;
  into.actions.insert(into.actions.end(), r.actions.begin(), r.actions.end());
  into.notes.insert(into.notes.end(), r.notes.begin(), r.notes.end());
  into.layers_reverted.insert(into.layers_reverted.end(), r.layers_reverted.begin(), r.layers_reverted.end());
  into.partial_backups_swept.insert(into.partial_backups_swept.end(), r.partial_backups_swept.begin(),
                                    r.partial_backups_swept.end());
  into.times.insert(into.times.end(), r.times.begin(), r.times.end());
  into.problems = std::move(r.problems);
  into.blocked_by = std::move(r.blocked_by);
  into.untracked_left = std::move(r.untracked_left);
  into.still_running = std::move(r.still_running);
  into.processes_examined += r.processes_examined;
  into.spared = r.spared;
}

}  // namespace

nlohmann::json RevertReport::to_json() const {
  nlohmann::json j = {{"had_manifest", had_manifest},
                      {"entries", entries},
                      {"entries_reverted", entries_reverted},
                      {"modules_removed", modules_removed},
                      {"actions", nlohmann::json::array()},
                      {"problems", nlohmann::json::array()},
                      {"untracked_outputs", untracked_json(untracked_left)},
                      {"processes_examined", processes_examined},
                      {"layers_reverted", layers_reverted},
                      {"blocked_by", blocked_by},
                      {"notes", notes},
                      {"mtimes", nlohmann::json::array()}};
  for (const auto& a : actions) j["actions"].push_back({{"action", a.action}, {"path", a.path}});
  for (const auto& p : problems) j["problems"].push_back({{"path", p.path}, {"reason", p.reason}});
  EngagementReport running;
  for (const auto& x : still_running) running.uses.push_back(still_running_use(x));
  j["still_running"] = processes_json(running);
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  for (const auto& t : times)
    j["mtimes"].push_back({{"entry", t.entry},
                           {"original", t.original},
                           {"why_fresh", t.original ? nlohmann::json(nullptr) : nlohmann::json(t.why_fresh)},
                           {"rewritten", t.rewritten},
                           {"changed_since", or_null(t.changed_since)}});
  return j;
}

RevertReport revert_natives(Disk& disk, const fs::path& overlay_in, const RevertOptions& opts) {
  fs::path overlay = absolute_normal(overlay_in);
  if (opts.with_layers && !opts.dry_run) {
    // Top-down: the layers above go first. Where one cannot, because an entry of ours was
    // stacked on top of it with --force (a criss-cross), our entries that no layer stands on go
    // first, newest first, and the layers are tried again. Each round reverts an entry of ours or
    // is the last: no cap is needed, the record's entries are finite.
    RevertOptions plain = opts;
    plain.with_layers = false;
    RevertReport report;
    for (;;) {
      report.problems.clear();
      unwind_layers(disk, overlay, opts, report);
      std::vector<RevertProblem> above = report.problems;  // why a layer above could not go
      merge_report(report, revert_natives(disk, overlay, plain));
      report.problems.insert(report.problems.begin(), above.begin(), above.end());
      if (report.blocked_by.empty()) return report;
      std::set<std::string> under = entries_under_layers(disk, overlay);
      auto m = load_manifest(disk, overlay);
      bool progress = false;
      for (std::size_t i = m ? m->natives.size() : 0; i-- > 0;) {
        const NativeEntry& e = m->natives[i];
        if (under.count(e.id) != 0) break;  // below here, everything stands under a layer still
        if (!selected(opts, e)) continue;
        RevertOptions one = plain;
        one.only_entry = e.id;
        one.only_patch.reset();
        RevertReport r = revert_natives(disk, overlay, one);
        progress = progress || r.entries_reverted > 0;
        merge_report(report, std::move(r));
      }
      if (!progress) return report;
    }
  }
  RevertReport report;
  FileInfo fi = disk.info(overlay / kManifestName, Follow::no);
  if (!fi.exists()) {
    // An add-native killed before its first record leaves backups and no manifest.
    if (!opts.dry_run && disk.info(overlay / kBackupDirName, Follow::no).type == FileType::directory) {
      OverlayLock lock(overlay, opts.lock_timeout);
      if (!disk.info(overlay / kManifestName, Follow::no).exists())
        sweep_partial_backups(disk, overlay, Manifest{}, report);
    }
    return report;
  }
  std::optional<OverlayLock> lock;
  if (!opts.dry_run) lock.emplace(overlay, opts.lock_timeout);
  auto m = load_manifest(disk, overlay);
  if (!m) return report;
  report.had_manifest = true;
  // A fold a crash interrupted is settled first: its entries are here, or they are not.
  if (m->fold_out && !opts.dry_run) settle_fold_out(disk, overlay, *m, opts.lock_timeout, opts.state_dir);
  bool folds_settled = !opts.dry_run && settle_folds_in(disk, overlay, *m);
  if (opts.spare_if && (report.spared = opts.spare_if(*m))) return report;
  if (!opts.dry_run) refuse_while_in_flight(disk, overlay);
  report.entries = m->natives.size();
  std::size_t litter_recorded = m->litter.size();
  if (!opts.dry_run) m->litter = litter_left(disk, m->litter);
  Reverter rev(disk, overlay, opts, report);
  // Which processes map the rebuilt artifacts now: after the revert they run replaced code.
  ProcessScan scan = opts.dry_run ? ProcessScan{} : scan_for_revert(disk, *m);
  report.processes_examined = scan.examined;
  m->running = still_running(m->running, scan);
  if (opts.only_patch && !has_patch(*m, *opts.only_patch)) {
    if (opts.missing_patch_ok) return report;
    throw Error("no entry of patch " + *opts.only_patch + " in " + overlay.string());
  }
  ManifestCache uppers_cache(disk);
  std::vector<Upper> ups = uppers_of(uppers_cache, *m);
  if (refused_under_layers(ups, *m, opts, report) && !(opts.dry_run && opts.with_layers)) return report;
  bool pruned = !opts.dry_run && prune_uppers(ups, *m);
  for (const auto& u : ups)
    if (u.state == RefState::vanished) rev.vanished_above.insert(u.ref.paths.begin(), u.ref.paths.end());
  for (std::size_t i = m->natives.size(); i-- > 0;) {
    if (!selected(opts, m->natives[i])) continue;
    if (auto stacked = rev.stacked_over(*m, m->natives[i])) {
      report.problems.push_back(*stacked);  // refused before any of the entry is touched
      continue;
    }
    if (auto copy =
            held_elsewhere(disk, overlay, m->natives[i], opts.state_dir, opts.adopt ? Copies::adopt : Copies::refuse)) {
      report.problems.push_back(*copy);  // refused before any of the entry is touched
      continue;
    }
    std::vector<RunningPatched> running = running_patched_of(disk, m->natives[i], scan);
    if (!rev.revert_entry(m->natives[i]) || opts.dry_run) continue;
    m->running.insert(m->running.end(), running.begin(), running.end());
    NativeEntry done = m->natives[i];
    m->natives.erase(m->natives.begin() + static_cast<std::ptrdiff_t>(i));
    // Trees the entry's restore renamed aside in the install are named on the record that
    // forgets the entry: nothing else would find them after a killed purge.
    for (auto& l : rev.store().take_litter()) m->litter.push_back(std::move(l));
    // A patch's Python entries leave the record in the same write as its native entry.
    std::vector<std::string> files =
        done.patch_id ? remove_patch_modules(*m, *done.patch_id) : std::vector<std::string>{};
    keep_untracked_of_reverted(disk, *m, done);
    keep_left_changes(disk, *m, done, rev.left());
    prune_uppers(ups, *m);
    save_manifest(disk, overlay, *m);  // the entry is gone from the record before its backups are
    pruned = false;
    rev.forget_backups(done);
    remove_module_files(disk, overlay, files, report);
    release_holds(disk, opts, overlay, done, *m);
    leave_lowers(disk, done, opts.lock_timeout);
    ++report.entries_reverted;
  }
  // A patch of Python files only (or whose native entry went earlier): its entries go now.
  if (opts.only_patch && !opts.dry_run && report.ok()) {
    std::vector<std::string> files = remove_patch_modules(*m, *opts.only_patch);
    if (!files.empty()) {
      save_manifest(disk, overlay, *m);
      remove_module_files(disk, overlay, files, report);
    }
  }
  if (!opts.dry_run) {
    sweep_partial_backups(disk, overlay, *m, report);
    // Litter that went since it was recorded leaves the record (when nothing else rewrote it).
    if (pruned || folds_settled || (report.entries_reverted == 0 && m->litter.size() != litter_recorded))
      save_manifest(disk, overlay, *m);
    // A kept entry's trash is not on the record, but it lies beside the entry's cache dir, where
    // the next revert of that entry finds it if this purge does not finish.
    std::vector<std::string> doomed = m->litter;
    for (auto& l : rev.store().take_litter()) doomed.push_back(std::move(l));
    BackupStore(disk, overlay).purge(doomed, Litter::out_of_install);
  }
  report.untracked_left = still_as_built(disk, m->untracked);
  report.still_running = m->running;
  return report;
}

std::optional<RevertProblem> held_elsewhere(Disk& disk, const fs::path& overlay, const NativeEntry& e,
                                            const fs::path& state_dir, Copies copies) {
  HoldRegistry holds(disk, state_dir.empty() ? HoldRegistry::default_state_dir() : state_dir);
  for (const auto& p : installed_paths(e)) {
    if (auto other = holds.held_instead(p, overlay))
      return RevertProblem{p.string(),
                           "held by overlay " + other->string() +
                               ", whose record names a change to it now: this record of entry " + e.id +
                               " is a copy of that overlay's (archived, restored) or superseded; left alone "
                               "(revert that overlay; delete this copy)"};
    if (copies == Copies::refuse)
      if (auto gone = holds.copy_of_vanished(p, overlay, e.id))
        return RevertProblem{
            p.string(),
            "changed by overlay " + gone->string() +
                ", which has moved or been deleted, and this overlay's directory " +
                "is not that one (a copy: cp -a, an archive restored, a move across filesystems): entry " + e.id +
                " left alone, since that overlay may still be applied under another name (revert it where it is; if it "
                "is gone for good, revert this copy with --adopt)"};
  }
  return std::nullopt;
}

}  // namespace overlay
