#include "overlay/holds.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"
#include "overlay/owner.hpp"

namespace overlay {

fs::path HoldIndex::per_host_state_dir(const fs::path& base, long fs_magic, const std::string& host) {
  // statfs(2) f_type values: NFS, SMB, CIFS, SMB2, Lustre, GPFS, BeeGFS, CephFS, 9p, AFS.
  static constexpr long kShared[] = {0x6969,     0x517B,     0xFF534D42L, 0xFE534D42L, 0x0BD00BD0,
                                     0x47504653, 0x19830326, 0x00C36400,  0x01021997,  0x5346414F};
  bool shared = std::find(std::begin(kShared), std::end(kShared), fs_magic) != std::end(kShared);
  return shared && !host.empty() ? base / ("host-" + host) : base;
}

fs::path HoldIndex::default_state_dir() {
  if (const char* s = std::getenv("OVERLAY_STATE_DIR"); s && *s) return s;
  fs::path base;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    base = fs::path(x) / "overlay";
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = fs::path(h) / ".local/state/overlay";
  else
    return fs::path("/tmp") / ("overlay-state-" + std::to_string(::getuid()));
  // The filesystem it is (or will be) on: its nearest existing ancestor's.
  fs::path probe = base;
  while (!real_disk().info(probe, Follow::yes).exists() && probe.has_relative_path()) probe = probe.parent_path();
  long magic = 0;
  // Unknown: the directory as it always was.
  best_effort("the state dir is taken as local", [&] { magic = static_cast<long>(real_disk().fs_type(probe)); });
  return per_host_state_dir(base, magic, this_host());
}

fs::path HoldIndex::hold_file(const fs::path& path) const { return dir_ / (sha256_hex(path.string()) + ".json"); }

namespace {

std::optional<std::string> opt_sha_of(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? std::optional<std::string>(j[key].get<std::string>()) : std::nullopt;
}

// The layers under the holder, nearest first: a path each (as an earlier version wrote them), or
// {overlay, original_sha256, patched_sha256}.
std::vector<HoldLayer> under_of(const json& j) {
  std::vector<HoldLayer> out;
  if (!j.contains("under") || !j["under"].is_array()) return out;
  for (const auto& u : j["under"]) {
    if (u.is_string())
      out.push_back({u.get<std::string>(), std::nullopt, std::nullopt});
    else if (u.is_object() && u.contains("overlay") && u["overlay"].is_string())
      out.push_back(
          {u["overlay"].get<std::string>(), opt_sha_of(u, "original_sha256"), opt_sha_of(u, "patched_sha256")});
  }
  return out;
}

// The overlays a hold record names: the holder first, then those under it.
std::vector<fs::path> named_overlays(const json& j) {
  std::vector<fs::path> out;
  if (j.contains("overlay") && j["overlay"].is_string()) out.emplace_back(j["overlay"].get<std::string>());
  for (auto& u : under_of(j)) out.push_back(std::move(u.overlay));
  return out;
}

}  // namespace

std::optional<Hold> HoldIndex::hold_of(const fs::path& path) {
  fs::path f = hold_file(path);
  if (disk_.info(f, Follow::no).type != FileType::regular) return std::nullopt;
  try {
    json j = parse_json_bytes(read_small_file(disk_, f, 1 << 16));
    if (j.value("path", "") != path.string() || !j.contains("overlay") || !j["overlay"].is_string())
      return std::nullopt;
    Hold h{j["overlay"].get<std::string>(),
           under_of(j),
           opt_sha_of(j, "original_sha256"),
           opt_sha_of(j, "patched_sha256"),
           false,
           {},
           {}};
    h.artifact = j.value("artifact", false);
    if (j.contains("overlay_dev") && j["overlay_dev"].is_number_unsigned() && j.contains("overlay_ino") &&
        j["overlay_ino"].is_number_unsigned())
      h.overlay_id = std::pair{j["overlay_dev"].get<std::uint64_t>(), j["overlay_ino"].get<std::uint64_t>()};
    h.entry = j.value("entry", std::string());
    return h;
  } catch (const std::exception&) {
    return std::nullopt;  // an unreadable hold holds nothing
  }
}

std::optional<fs::path> HoldIndex::held_instead(const fs::path& path, const fs::path& overlay) {
  auto h = hold_of(path);
  if (!h || h->overlay == overlay) return std::nullopt;
  for (const auto& u : h->under)
    if (u.overlay == overlay) return std::nullopt;  // a layer under it: the stack's rules decide
  // The same directory by another name (a bind mount, a symlink): ours. A copy is another inode.
  FileInfo held = disk_.info(h->overlay, Follow::yes), ours = disk_.info(overlay, Follow::yes);
  if (held.exists() && held.dev == ours.dev && held.ino == ours.ino) return std::nullopt;
  if (still_holds(h->overlay, path)) return h->overlay;
  // The top let go (reverted, killed before its record, moved away): the nearest layer under it
  // that still records a change holds the file now (claims checker: a copy of the accepted
  // overlay, under a candidate's layer that had gone, reverted the accepted change).
  return live_under(path, *h, overlay);
}

std::optional<fs::path> HoldIndex::copy_of_vanished(const fs::path& path, const fs::path& overlay,
                                                    const std::string& entry) {
  auto h = hold_of(path);
  if (!h || h->overlay == overlay || !h->overlay_id || entry.empty()) return std::nullopt;
  // The hold names the newest entry on the path; an older one of the same record is the holder's
  // too (claims checker: a copy of a moved overlay with two entries on one file reverted the older).
  if (h->entry != entry && !records_entry(overlay, h->entry)) return std::nullopt;
  for (const auto& u : h->under)
    if (u.overlay == overlay) return std::nullopt;
  FileInfo ours = disk_.info(overlay, Follow::yes);
  if (!ours.exists() || (ours.dev == h->overlay_id->first && ours.ino == h->overlay_id->second))
    return std::nullopt;  // it, moved
  // A directory stands where the hold names the holder. The holder itself: it let go of the entry
  // (a revert). Another one, or the holder rebuilt file by file: where a fold moved the entry from
  // it into `overlay`, the hold is one that did not follow (holds are not fsynced: a power cut may
  // lose the move); else the holder was moved away and another directory made at its path (claims
  // checker: the copy's revert put back both entries over the moved overlay's live change).
  if (FileInfo there = disk_.info(h->overlay, Follow::yes); there.type == FileType::directory) {
    if (there.dev == h->overlay_id->first && there.ino == h->overlay_id->second) return std::nullopt;
    if (received_by_fold(overlay, h->overlay, entry)) return std::nullopt;
  }
  return still_holds(h->overlay, path) ? std::nullopt
                                       : std::optional<fs::path>(h->overlay);  // a live holder: held_instead's
}

bool HoldIndex::records_entry(const fs::path& overlay, const std::string& entry) {
  try {
    const auto& m = record_of(overlay);
    return m && std::any_of(m->natives.begin(), m->natives.end(), [&](const NativeEntry& e) { return e.id == entry; });
  } catch (const Error& e) {
    (void)e;  // a record that cannot be read records no entry (its revert refuses anyway)
    return false;
  }
}

bool HoldIndex::received_by_fold(const fs::path& overlay, const fs::path& from, const std::string& entry) {
  try {
    const auto& m = record_of(overlay);
    if (!m) return false;
    auto from_there = [&](const std::string& o) { return fs::path(o) == from; };
    return std::any_of(m->folds_in.begin(), m->folds_in.end(),
                       [&](const FoldMark& f) { return from_there(f.overlay); }) ||
           std::any_of(m->natives.begin(), m->natives.end(), [&](const NativeEntry& e) {
             return e.id == entry && e.folded_from && from_there(*e.folded_from);
           });
  } catch (const Error&) {
    return false;  // a record that cannot be read is no fold's receiver (its revert refuses anyway)
  }
}

std::optional<fs::path> HoldIndex::holder(const fs::path& path) {
  auto h = hold_of(path);
  return h ? std::optional<fs::path>(h->overlay) : std::nullopt;
}

std::vector<fs::path> HoldIndex::overlays() {
  std::vector<fs::path> out;
  if (disk_.info(dir_, Follow::no).type != FileType::directory) return out;
  for (const auto& e : disk_.list_dir(dir_)) {
    if (e.name.size() < 5 || e.name.compare(e.name.size() - 5, 5, ".json") != 0) continue;
    best_effort("an unreadable hold names no overlay", [&] {
      json j = parse_json_bytes(read_small_file(disk_, dir_ / e.name, 1 << 16));
      for (auto& o : named_overlays(j)) out.push_back(std::move(o));
    });
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool records_change_to(const Manifest& m, const fs::path& path) {
  const std::string p = path.string();
  return std::any_of(m.natives.begin(), m.natives.end(), [&](const NativeEntry& e) {
    return std::any_of(e.sources.begin(), e.sources.end(), [&](const SourceItem& s) { return s.install_path == p; }) ||
           std::any_of(e.created.begin(), e.created.end(), [&](const CreatedItem& c) { return c.path == p; }) ||
           std::any_of(e.artifacts.begin(), e.artifacts.end(), [&](const ArtifactItem& a) { return a.path == p; });
  });
}

const std::optional<Manifest>& HoldIndex::record_of(const fs::path& overlay) {
  if (!records_) return scratch_ = load_manifest(disk_, overlay);
  if (records_->unreadable(overlay)) throw ManifestError(records_->why_unreadable(overlay));
  return records_->get(overlay);
}

OverlayLock HoldRegistry::lock_registry(double lock_timeout) {
  make_dirs(writer_, dir_, 0700);
  return OverlayLock(dir_, lock_timeout, {}, LockOn::directory);
}

bool HoldIndex::still_holds(const fs::path& ov, const fs::path& path) {
  try {
    const auto& m = record_of(ov);
    return m && records_change_to(*m, path);
  } catch (const Error&) {
    return true;  // cannot tell: refusing is the safe side
  }
}

void HoldRegistry::write_hold(const fs::path& p, const Hold& hold) {
  // Written atomically but not fsynced: a hold lost to a power cut only loses a convenience
  // check, and two fsyncs per add-native are a measurable share of a small A/B cycle.
  json j = {{"path", p.string()}, {"overlay", hold.overlay.string()}};
  auto id = hold.overlay_id;
  if (FileInfo d = writer_.info(hold.overlay, Follow::yes); d.type == FileType::directory)
    id = std::pair{std::uint64_t(d.dev), std::uint64_t(d.ino)};
  if (id) {
    j["overlay_dev"] = id->first;
    j["overlay_ino"] = id->second;
  }
  if (!hold.entry.empty()) j["entry"] = hold.entry;
  if (hold.original_sha256) j["original_sha256"] = *hold.original_sha256;
  if (hold.patched_sha256) j["patched_sha256"] = *hold.patched_sha256;
  if (hold.artifact) j["artifact"] = true;
  if (!hold.under.empty()) {
    j["under"] = json::array();
    for (const auto& u : hold.under) {
      json l = {{"overlay", u.overlay.string()}};
      if (u.original_sha256) l["original_sha256"] = *u.original_sha256;
      if (u.patched_sha256) l["patched_sha256"] = *u.patched_sha256;
      j["under"].push_back(std::move(l));
    }
  }
  fs::path tmp = hold_file(p);
  tmp += ".tmp";
  auto out = writer_.create(tmp, 0644, CreateMode::truncate);
  std::string text = dump_json_bytes(j) + "\n";
  out->write(text.data(), text.size());
  out->close();
  writer_.rename(tmp, hold_file(p));
}

std::vector<std::unique_ptr<OverlayLock>> lock_names(Disk& disk, const fs::path& dir, std::vector<std::string> names,
                                                     double lock_timeout, const std::string& what) {
  std::sort(names.begin(), names.end());  // one order for every taker: no deadlock
  names.erase(std::unique(names.begin(), names.end()), names.end());
  make_dirs(disk, dir, 0700);
  std::vector<std::unique_ptr<OverlayLock>> held;
  for (const auto& n : names) {
    fs::path lock = dir / sha256_hex(n);
    disk.make_dir(lock, 0700);
    held.push_back(std::make_unique<OverlayLock>(lock, lock_timeout, n + " (" + what + ")", LockOn::directory));
  }
  return held;
}

std::vector<std::unique_ptr<OverlayLock>> HoldRegistry::lock_paths(const std::vector<fs::path>& paths,
                                                                   double lock_timeout) {
  std::vector<std::string> names(paths.begin(), paths.end());
  return lock_names(writer_, dir_.parent_path() / "hold-locks", names, lock_timeout, "another add-native taking it");
}

std::optional<std::string> sha_now(DiskReader& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::no);
  if (!fi.exists()) return std::string();
  if (fi.type != FileType::regular) return std::nullopt;
  try {
    return hash_file(disk, p);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string OrphanHold::describe() const {
  std::string who = "overlay " + hold.overlay.string() +
                    (vanished ? ", which has vanished (no manifest there now: deleted or moved)"
                              : ", whose manifest no longer lists it");
  if (file_state == "patched")
    return who + "; the file holds that overlay's patched bytes, and the original is lost with its backups";
  if (file_state == "third version")
    return who + "; the file holds neither its original nor its patched bytes (a third version)";
  if (file_state == "original") return who + "; the file holds the original bytes";
  if (file_state == "changed")
    return who + "; the file is not the original it recorded (what a build made of it, or changed since)";
  return who + "; whether the file holds the original cannot be told (the hold records no checksums)";
}

std::optional<OrphanHold> HoldIndex::judge_orphan(const fs::path& path, const Hold& hold) {
  if (still_holds(hold.overlay, path)) return std::nullopt;
  OrphanHold o{path, hold, false, hold.artifact && !hold.original_sha256 ? "original" : "unknown"};
  try {
    o.vanished = !record_of(hold.overlay);
  } catch (const Error&) {
    o.vanished = false;  // unreadable: still_holds said it holds, so not reached
  }
  if (hold.original_sha256) {
    auto now = sha_now(disk_, path);
    bool has_patched = hold.patched_sha256 && !hold.patched_sha256->empty();
    o.file_state = now && *now == *hold.original_sha256  ? "original"
                   : !has_patched                        ? "changed"  // an artifact: what a build made of it
                   : now && *now == *hold.patched_sha256 ? "patched"
                                                         : "third version";
  }
  return o;
}

std::optional<OrphanHold> HoldIndex::orphan_of(const fs::path& path) {
  auto h = hold_of(path);
  return h ? judge_orphan(path, *h) : std::nullopt;
}

std::vector<OrphanHold> HoldIndex::orphans() {
  std::vector<OrphanHold> out;
  if (disk_.info(dir_, Follow::no).type != FileType::directory) return out;
  for (const auto& e : disk_.list_dir(dir_)) {
    if (e.name.size() < 5 || e.name.compare(e.name.size() - 5, 5, ".json") != 0) continue;
    best_effort("an unreadable hold names no orphan", [&] {
      json j = parse_json_bytes(read_small_file(disk_, dir_ / e.name, 1 << 16));
      if (!j.contains("path") || !j["path"].is_string()) return;
      std::string path = j["path"].get<std::string>();
      if (auto o = orphan_of(path)) out.push_back(std::move(*o));
      // A layer under the holder that vanished: its original went with it, whatever is on top.
      auto h = hold_of(path);
      for (const auto& u : h ? h->under : std::vector<HoldLayer>{})
        if (vanished(u.overlay))
          if (auto o =
                  judge_orphan(path, Hold{u.overlay, {}, u.original_sha256, u.patched_sha256, h->artifact, {}, {}}))
            out.push_back(std::move(*o));
    });
  }
  std::sort(out.begin(), out.end(), [](const OrphanHold& a, const OrphanHold& b) { return a.path < b.path; });
  return out;
}

// A hold whose holder is gone (or no longer lists the file) while the file is not the original
// it recorded: backing the file up now would take another candidate's bytes for the original. A
// hold without checksums (an earlier version's) is judged as before unless its holder vanished.
// The layers under a holder that no longer records the file are judged too, down to the first
// that still does: the holder's "original" is the bytes of the layer under it (found by the claims
// checker, seed 647990305: a candidate killed after its claim on top of the accepted overlay, the
// accepted overlay then deleted with its backups; the next exec judged only the candidate's hold,
// found its "original" — the accepted overlay's patched bytes — and backed them up as the
// original).
std::optional<OrphanHold> HoldIndex::lost_original(const fs::path& p, const Hold& h) {
  auto lost = [&](const Hold& one) -> std::optional<OrphanHold> {
    auto o = judge_orphan(p, one);
    if (!o || o->file_state == "original" || (!o->vanished && o->file_state == "unknown")) return std::nullopt;
    return o;
  };
  if (auto o = lost(h)) return o;
  if (still_holds(h.overlay, p)) return std::nullopt;
  for (const auto& u : h.under) {
    if (still_holds(u.overlay, p)) break;  // a live layer: its change, its original
    if (auto o = lost(Hold{u.overlay, {}, u.original_sha256, u.patched_sha256, h.artifact, {}, {}})) return o;
  }
  return std::nullopt;
}

std::optional<fs::path> HoldIndex::live_under(const fs::path& p, const Hold& h, const fs::path& overlay) {
  for (const auto& u : h.under)
    if (u.overlay != overlay && still_holds(u.overlay, p)) return u.overlay;
  return std::nullopt;
}

void HoldRegistry::note_entry(const std::vector<fs::path>& paths, const std::map<fs::path, std::string>& originals,
                              const fs::path& overlay, const std::string& id, double lock_timeout) {
  OverlayLock lock(dir_, lock_timeout, {}, LockOn::directory);
  for (const auto& p : paths) {
    auto h = hold_of(p);
    if (!h || h->overlay != overlay) continue;
    h->entry = id;
    if (auto o = originals.find(p); o != originals.end() && !h->original_sha256) h->original_sha256 = o->second;
    write_hold(p, *h);  // with the directory's identity, now that it exists
  }
}

void HoldRegistry::give_back(const HoldClaim& claim, const fs::path& overlay, double lock_timeout) {
  OverlayLock lock(dir_, lock_timeout, {}, LockOn::directory);
  for (const auto& [p, before] : claim.previous) {
    auto h = holder(p);
    if (!h || *h != overlay || (before && before->overlay == overlay)) continue;
    if (before)
      write_hold(p, *before);
    else
      writer_.remove(hold_file(p));
  }
}

void HoldRegistry::release(const std::vector<fs::path>& paths, const fs::path& overlay, const Manifest& recorded,
                           double lock_timeout, const NativeEntry* reverted) {
  if (writer_.info(dir_, Follow::no).type != FileType::directory) return;
  OverlayLock lock(dir_, lock_timeout, {}, LockOn::directory);
  // Whether the hold on p is the reverted entry's own, recorded under the overlay's old path.
  auto moved_here = [&](const fs::path& p, const Hold& h) {
    if (reverted == nullptr || !h.original_sha256 || still_holds(h.overlay, p)) return false;
    const std::string ps = p.string();
    return std::any_of(reverted->sources.begin(), reverted->sources.end(),
                       [&](const SourceItem& s) {
                         return s.install_path == ps && s.sha256 == *h.original_sha256 &&
                                s.patched_sha256.value_or("") == h.patched_sha256.value_or("");
                       }) ||
           std::any_of(reverted->artifacts.begin(), reverted->artifacts.end(),
                       [&](const ArtifactItem& a) {
                         return a.path == ps && (a.existed ? a.sha256 : "") == *h.original_sha256;
                       }) ||
           std::any_of(reverted->created.begin(), reverted->created.end(),
                       [&](const CreatedItem& c) { return c.path == ps && h.original_sha256->empty(); });
  };
  for (const auto& p : paths) {
    auto h = hold_of(p);
    if (!h || records_change_to(recorded, p)) continue;
    std::vector<HoldLayer> chain{{h->overlay, h->original_sha256, h->patched_sha256}};
    chain.insert(chain.end(), h->under.begin(), h->under.end());
    // Where the reverted overlay stands in the file's stack: on top (or on top under its old path,
    // moved since), or under layers that all vanished (their bytes just gave way to its original).
    // An add-native between its claim and its record holds the path's lock, and its overlay has
    // no record yet: it is not vanished, and its hold is left to it (found by the claims checker:
    // gc-stale reverting the lower under a candidate's claim dropped the candidate's hold, and a
    // third add-native took the file over while the candidate built).
    //
    // Layers above it that no longer record the file (vanished, or a revert killed between its
    // record and its release) stood on what this revert just replaced: they go too.
    // An add-native between its claim and its swap (the path's lock held) owns the hold, whoever
    // is on top: its overlay may be this very one (an agent's next candidate into the overlay
    // gc-stale is reverting the stale entries of), and the claim stands on what it judged.
    // Found by the claims checker (issue 50, seed 4085746674, agents reusing their overlay): the
    // hold was dropped under the claim, the new entry recorded with none.
    if (being_claimed(p)) continue;
    std::size_t at = h->overlay == overlay || moved_here(p, *h) ? 0 : chain.size();
    for (std::size_t i = 1; at == chain.size() && i < chain.size() && !still_holds(chain[i - 1].overlay, p); ++i)
      if (chain[i].overlay == overlay) at = i;
    if (at == chain.size()) continue;
    // The nearest layer under it whose change to p is still on record holds p again, with the
    // checksums it had there; so does one that no longer records it (vanished, or deleted and
    // made again at its path), whose bytes may be what this revert put back (status --all and
    // which then name it, and what the file holds against its record) — unless the file holds the
    // bytes from before the whole stack: then nothing of it is there. (Found by the claims
    // checker: the accepted overlay deleted and made again under a candidate's revert, the hold
    // on its library dropped over its build, and `status --all --check-clean` said clean.)
    const std::optional<std::string>& bottom = chain.back().original_sha256;
    std::optional<bool> pristine;
    auto is_pristine = [&] {
      if (!pristine) pristine = bottom && sha_now(writer_, p) == *bottom;
      return *pristine;
    };
    auto next = std::find_if(chain.begin() + static_cast<std::ptrdiff_t>(at) + 1, chain.end(), [&](const HoldLayer& u) {
      return u.overlay != overlay && (still_holds(u.overlay, p) || !is_pristine());
    });
    if (next == chain.end())
      writer_.remove(hold_file(p));
    else
      write_hold(p, Hold{next->overlay,
                         std::vector<HoldLayer>(next + 1, chain.end()),
                         next->original_sha256,
                         next->patched_sha256,
                         h->artifact,
                         {},
                         {}});
  }
}

bool HoldIndex::being_claimed(const fs::path& p) {
  fs::path lock = dir_.parent_path() / "hold-locks" / sha256_hex(p.string());
  if (disk_.info(lock, Follow::no).type != FileType::directory) return false;
  try {
    OverlayLock free_now(lock, 0, {}, LockOn::directory);
    return false;
  } catch (const Error&) {
    return true;  // held (LockTimeout), or not to be told: leaving the hold is the safe side
  }
}

bool HoldIndex::vanished(const fs::path& ov) {
  try {
    return !record_of(ov);
  } catch (const Error&) {
    return false;  // there, but unreadable
  }
}

void HoldRegistry::transfer(const std::vector<std::pair<fs::path, std::string>>& moved, const fs::path& from,
                            const fs::path& into, std::optional<std::pair<std::uint64_t, std::uint64_t>> into_id,
                            double lock_timeout) {
  if (writer_.info(dir_, Follow::no).type != FileType::directory) return;
  OverlayLock lock(dir_, lock_timeout, {}, LockOn::directory);
  for (const auto& [p, entry] : moved) {
    auto h = hold_of(p);
    if (!h || h->overlay != from) continue;
    Hold now = *h;
    now.overlay = into;
    now.overlay_id = into_id;  // not `from`'s
    if (!entry.empty()) now.entry = entry;
    if (!h->under.empty() && h->under.front().overlay == into) {
      now.original_sha256 = h->under.front().original_sha256;  // the lower's original: one layer fewer
      now.under.erase(now.under.begin());
    }
    write_hold(p, now);
  }
}

namespace {
fs::path cache_note(const fs::path& holds_dir, const std::string& id) {
  if (id.empty() || id[0] == '.' || id.find('/') != std::string::npos) throw Error("not an entry id: " + id);
  return holds_dir.parent_path() / "caches" / (id + ".json");
}
}  // namespace

void HoldRegistry::note_caches(const fs::path& overlay, const std::string& id, const std::vector<CacheItem>& caches) {
  json list = json::array();
  for (const auto& c : caches)
    if (!c.layer)
      list.push_back({{"dir", c.dir}, {"existed", c.existed}, {"aside", c.aside ? json(*c.aside) : json()}});
  if (list.empty()) return;
  fs::path note = cache_note(dir_, id);
  make_dirs(writer_, note.parent_path(), 0700);
  // Not fsynced, as a hold: lost to a power cut, it loses a check, never a byte of the install.
  write_file_atomically(writer_, note,
                        dump_json_bytes({{"overlay", overlay.string()}, {"entry", id}, {"caches", list}}) + "\n", 0644,
                        NameDurable::no);
}

void HoldRegistry::forget_caches(const std::string& id) {
  fs::path note = cache_note(dir_, id);
  if (writer_.info(note, Follow::no).exists()) writer_.remove(note);
}

std::vector<OrphanCache> HoldIndex::orphan_caches() {
  std::vector<OrphanCache> out;
  fs::path dir = dir_.parent_path() / "caches";
  if (disk_.info(dir, Follow::no).type != FileType::directory) return out;
  // A cache dir that an overlay the registry knows records is that overlay's (a fold moved the
  // entry there, or another entry invalidated it too): its own status speaks of it.
  std::set<std::string> recorded;
  for (const auto& o : overlays()) {
    std::optional<Manifest> m;
    try {
      m = record_of(o);
    } catch (const Error& e) {
      spdlog::debug("the record of {} is unreadable ({}): it records no cache", o.string(), e.what());
    }
    for (const auto& e : m ? m->natives : std::vector<NativeEntry>{})
      for (const auto& c : e.caches) recorded.insert(c.dir);
  }
  for (const auto& f : disk_.list_dir(dir)) {
    try {
      json j = parse_json_bytes(read_small_file(disk_, dir / f.name, 1 << 20));
      fs::path overlay = j.at("overlay").get<std::string>();
      if (!vanished(overlay)) continue;
      for (const auto& c : j.at("caches")) {
        OrphanCache o{overlay, c.at("dir").get<std::string>(), j.at("entry").get<std::string>(), {}, false};
        if (recorded.count(o.dir.string()) != 0) continue;
        FileInfo now = disk_.info(o.dir, Follow::no);
        if (!c.at("aside").is_null()) {
          auto a = c.at("aside").get<AsideDir>();
          FileInfo kept = disk_.info(a.path, Follow::no);
          if (kept.type == FileType::directory && kept.dev == a.dev && kept.ino == a.ino) o.aside = a.path;
        } else {
          o.dir_there = now.exists();
          o.existed = c.value("existed", true);
        }
        out.push_back(std::move(o));
      }
    } catch (const std::exception& e) {
      spdlog::debug("cache note {} is unreadable ({}): it names no cache", (dir / f.name).string(), e.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const OrphanCache& a, const OrphanCache& b) {
    return std::tie(a.overlay, a.dir) < std::tie(b.overlay, b.dir);
  });
  return out;
}

std::string OrphanCache::describe() const {
  // Moved, the overlay still records the entry where it is now, and its revert puts the original
  // back (renaming the copy by hand would make that revert refuse it); deleted, nothing will.
  std::string head = "cache " + dir.string() + ": invalidated by overlay " + overlay.string() + " (entry " + entry +
                     "), which has vanished";
  std::string moved = "moved: revert it where it is now; deleted: ";
  if (aside)
    return head + "; it holds that overlay's build, its original is kept aside at " + aside->string() + " (" + moved +
           "put it back: rm -rf " + dir.string() + " && mv " + aside->string() + " " + dir.string() + ")";
  if (dir_there)
    return head + (existed ? " with its original" : " (there was none before)") +
           "; it may hold that overlay's build (" + moved + "clear it: rm -rf " + dir.string() + ")";
  return head + "; the original is back or the cache is cleared";
}

}  // namespace overlay
