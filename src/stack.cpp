#include "overlay/stack.hpp"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "overlay/error.hpp"

namespace overlay {

const LayerRef* layer_of(const NativeEntry& e, const std::string& path) {
  for (const auto& s : e.sources)
    if (s.install_path == path && s.layer) return &*s.layer;
  for (const auto& c : e.created)
    if (c.path == path && c.layer) return &*c.layer;
  for (const auto& a : e.artifacts)
    if (a.path == path && a.layer) return &*a.layer;
  for (const auto& c : e.caches)
    if (c.dir == path && c.layer) return &*c.layer;
  return nullptr;
}

std::vector<std::string> tracked_paths(const NativeEntry& e) {
  std::vector<std::string> out;
  for (const auto& s : e.sources) out.push_back(s.install_path);
  for (const auto& c : e.created) out.push_back(c.path);
  for (const auto& a : e.artifacts) out.push_back(a.path);
  for (const auto& c : e.caches) out.push_back(c.dir);
  return out;
}

namespace {

// The change one entry made to `path`, and what it found there (before): nothing where it does
// not track the file.
struct EntryChange {
  std::optional<std::string> before, after;  // before: "" absent; after: none for an artifact
  const LayerRef* layer = nullptr;
  bool artifact = false;
};

std::optional<EntryChange> change_of(const NativeEntry& e, const std::string& path) {
  for (const auto& s : e.sources)
    if (s.install_path == path)
      return EntryChange{s.sha256, s.deleted ? std::string() : s.patched_sha256.value_or(""),
                         s.layer ? &*s.layer : nullptr};
  for (const auto& c : e.created)
    if (c.path == path) return EntryChange{std::string(), c.sha256, c.layer ? &*c.layer : nullptr};
  for (const auto& a : e.artifacts)
    if (a.path == path)
      return EntryChange{a.existed ? a.sha256 : "", std::nullopt, a.layer ? &*a.layer : nullptr, true};
  for (const auto& c : e.caches)  // a directory: no digest of it either way
    if (c.dir == path) return EntryChange{std::string(), std::nullopt, c.layer ? &*c.layer : nullptr, true};
  return std::nullopt;
}

bool records_layer_on(const Manifest& m, const std::string& entry, const std::vector<std::string>& paths) {
  for (const auto& e : m.natives)
    if (e.id == entry)
      return std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return layer_of(e, p) != nullptr; });
  return false;
}

}  // namespace

std::optional<RecordedChange> recorded_change(const Manifest& m, const std::string& path) {
  std::optional<RecordedChange> out;
  for (const auto& e : m.natives) {
    auto c = change_of(e, path);
    if (!c) continue;
    if (!out)
      out = RecordedChange{e.id, std::nullopt, c->layer ? c->layer->pristine_sha256 : c->before.value_or(""),
                           c->artifact};
    out->entry = e.id;  // the newest entry's change is the one on top
    out->after = c->after;
  }
  return out;
}

const char* to_string(RefState s) {
  switch (s) {
    case RefState::live:
      return "live";
    case RefState::stale:
      return "stale";
    case RefState::vanished:
      return "vanished";
    case RefState::unreadable:
      return "unreadable";
  }
  return "?";
}

std::vector<Upper> uppers_of(ManifestCache& cache, const Manifest& m) {
  std::vector<Upper> out;
  for (const auto& ref : m.layers_above) {
    Upper u{ref, RefState::live};
    const auto& um = cache.get(ref.overlay);
    if (cache.unreadable(ref.overlay))
      u.state = RefState::unreadable;
    else if (!um)
      u.state = RefState::vanished;
    else if (!records_layer_on(*um, ref.entry, ref.paths))
      u.state = RefState::stale;
    if (um)
      for (const auto& e : um->natives)
        if (e.id == ref.entry)
          for (const auto& p : ref.paths)
            if (const LayerRef* l = layer_of(e, p);
                l && std::find(u.on_entries.begin(), u.on_entries.end(), l->entry) == u.on_entries.end())
              u.on_entries.push_back(l->entry);
    out.push_back(std::move(u));
  }
  return out;
}

RefState lower_state(ManifestCache& cache, const LayerRef& layer, const std::string& path) {
  if (cache.unreadable(layer.overlay)) return RefState::unreadable;
  const auto& lm = cache.get(layer.overlay);
  if (!lm) return RefState::vanished;
  return recorded_change(*lm, path) ? RefState::live : RefState::stale;
}

namespace {

// The layers below `overlay`'s change to `path`, nearest last (so the result reads bottom first).
void below(ManifestCache& cache, const Manifest& m, const std::string& path, FileStack& out,
           std::set<std::string>& seen) {
  // The oldest entry on the file is the one put on the layer below; newer ones stack on it.
  auto first = std::find_if(m.natives.begin(), m.natives.end(),
                            [&](const NativeEntry& e) { return change_of(e, path).has_value(); });
  const LayerRef* l = first == m.natives.end() ? nullptr : layer_of(*first, path);
  if (l == nullptr || !seen.insert(l->overlay).second) return;
  const auto& lm = cache.get(l->overlay);
  RefState st = lower_state(cache, *l, path);
  if (lm && st == RefState::live) below(cache, *lm, path, out, seen);
  out.push_back({l->overlay, l->entry, st});
}

void above(ManifestCache& cache, const Manifest& m, const std::string& path, FileStack& out,
           std::set<std::string>& seen) {
  for (const auto& u : uppers_of(cache, m)) {
    if (u.state == RefState::stale || std::find(u.ref.paths.begin(), u.ref.paths.end(), path) == u.ref.paths.end())
      continue;
    if (!seen.insert(u.ref.overlay).second) continue;
    out.push_back({u.ref.overlay, u.ref.entry, u.state});
    if (const auto& um = cache.get(u.ref.overlay); um && u.state == RefState::live) above(cache, *um, path, out, seen);
  }
}

}  // namespace

FileStack stack_of(ManifestCache& cache, const std::string& overlay, const Manifest& m, const std::string& path) {
  FileStack out;
  std::set<std::string> seen{overlay};
  below(cache, m, path, out, seen);
  auto own = recorded_change(m, path);
  out.push_back({overlay, own ? own->entry : std::string(), RefState::live});
  above(cache, m, path, out, seen);
  return out;
}

std::string describe_stack(const FileStack& s) {
  std::string out;
  for (const auto& l : s) {
    out += (out.empty() ? "" : " < ") + l.overlay + (l.entry.empty() ? "" : " [" + l.entry + "]");
    if (l.state != RefState::live) out += std::string(" (") + to_string(l.state) + ")";
  }
  return out;
}

// --- Claiming files -------------------------------------------------------------------------

namespace {

// One claim's view of the registry: every record it asks about read once (through `records`).
class Claimer {
 public:
  Claimer(HoldRegistry& holds, ManifestCache& records) : records_(records), reg_(holds.reading_through(records)) {}
  std::optional<std::string> why_taken(const fs::path& p, const fs::path& overlay, const std::optional<fs::path>& over);
  std::optional<std::string> held_by_two(const std::vector<fs::path>& paths, const fs::path& overlay);
  HoldClaim acquire(const std::vector<HeldFile>& files, const fs::path& overlay, bool force, double lock_timeout,
                    const std::optional<fs::path>& over);

 private:
  // Whether `p` is taken as a layer on `lower` (see acquire).
  bool layered_on(const fs::path& p, const std::optional<Hold>& h, const fs::path& overlay, const fs::path& lower,
                  bool force);
  ManifestCache& records_;
  HoldRegistry reg_;
};

std::optional<std::string> Claimer::why_taken(const fs::path& p, const fs::path& overlay,
                                              const std::optional<fs::path>& over) {
  auto h = reg_.hold_of(p);
  if (!h) return std::nullopt;
  if (over && h->overlay == *over && reg_.still_holds(*over, p)) return std::nullopt;
  if (reg_.still_holds(h->overlay, p))
    return h->overlay == overlay ? std::nullopt
                                 : std::optional<std::string>(
                                       p.string() + " is held by overlay " + h->overlay.string() +
                                       " (revert it first, or stack on it with --over " + h->overlay.string() + ")");
  if (auto o = reg_.lost_original(p, *h)) return p.string() + " was changed by " + o->describe();
  // The holder on top no longer records the file, but a layer under it does: its change is in
  // place (found by the claims checker: exec --ref ran over the accepted overlay's bytes).
  if (auto below = reg_.live_under(p, *h, overlay); below && (!over || *below != *over))
    return p.string() + " is held by overlay " + below->string() + " (under " + h->overlay.string() +
           ", which no longer records it): revert it first, or stack on it with --over " + below->string();
  return std::nullopt;
}

// Whether `p` is taken as a layer on `lower`: lower records a change to it, `overlay` does not
// (a second entry of its own stacks on its own change), and no overlay above lower holds it;
// refused (Error naming the one above) where one does. A vanished holder above lower whose bytes
// are in place is refused too, unless forced (then taken over as a plain --force does).
bool Claimer::layered_on(const fs::path& p, const std::optional<Hold>& h, const fs::path& overlay,
                         const fs::path& lower, bool force) {
  if (!reg_.still_holds(lower, p) || reg_.still_holds(overlay, p)) return false;
  if (!h || h->overlay == lower || h->overlay == overlay) return true;
  if (reg_.still_holds(h->overlay, p))
    throw Error(p.string() + " is held by overlay " + h->overlay.string() + ", above " + lower.string() +
                " (revert it first, or stack on it with --over " + h->overlay.string() + ")");
  auto o = reg_.lost_original(p, *h);
  if (!o) return true;
  if (force) return false;
  throw Error(p.string() + " was changed by " + o->describe() + ", on top of " + lower.string() +
              ": revert that overlay where it is now, or revert " + lower.string() + " (which restores the original)");
}

// A layer stands on one overlay: a change whose files two live overlays hold (one stacked on the
// other) is refused by each --over for the file the other holds. Said once, with the way out.
std::optional<std::string> Claimer::held_by_two(const std::vector<fs::path>& paths, const fs::path& overlay) {
  std::vector<std::pair<fs::path, fs::path>> holders;  // (holder, the first path it holds), in path order
  std::map<fs::path, std::set<fs::path>> stands_on;
  for (const auto& p : paths) {
    auto h = reg_.hold_of(p);
    if (!h || h->overlay == overlay || !reg_.still_holds(h->overlay, p)) continue;
    for (const auto& u : h->under) stands_on[h->overlay].insert(u.overlay);
    if (std::none_of(holders.begin(), holders.end(), [&](const auto& x) { return x.first == h->overlay; }))
      holders.emplace_back(h->overlay, p);
  }
  if (holders.size() < 2) return std::nullopt;
  auto [upper, up] = holders[0];
  auto [lower, low] = holders[1];
  if (stands_on[lower].count(upper) != 0) {
    std::swap(upper, lower);
    std::swap(up, low);
  }
  std::string held =
      up.string() + " is held by overlay " + upper.string() + " and " + low.string() + " by overlay " + lower.string();
  if (stands_on[upper].count(lower) == 0)
    return held + ": a change stacks on one overlay; revert one of them first, or pass --force";
  return held + ", which " + upper.string() + " stands on: a layer stacks on one overlay, so fold " + upper.string() +
         " into it first (overlay fold --from " + upper.string() + " --into " + lower.string() + ") or revert " +
         upper.string() + ", then stack on it with --over " + lower.string();
}

HoldClaim Claimer::acquire(const std::vector<HeldFile>& files, const fs::path& overlay, bool force, double lock_timeout,
                           const std::optional<fs::path>& over) {
  HoldClaim claim;
  std::vector<fs::path> paths;
  for (const auto& f : files) paths.push_back(f.path);
  claim.locks = reg_.lock_paths(paths, lock_timeout);
  // Records read before (the plan's) are read again now that no other claim on these paths can
  // come between: each parsed again only where its bytes changed.
  records_.reread_all();
  if (over && records_.unreadable(*over)) throw ManifestError(records_.why_unreadable(*over));
  OverlayLock lock = reg_.lock_registry(lock_timeout);
  if (!force)
    if (auto why = held_by_two(paths, overlay)) throw Error(*why);
  std::vector<bool> layer(paths.size(), false);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const fs::path& p = paths[i];
    auto h = reg_.hold_of(p);
    if (over && (layer[i] = layered_on(p, h, overlay, *over, force))) {
      claim.previous.emplace_back(p, h);
      claim.layered.push_back(p);
      continue;
    }
    // Our own path counts as another holder once its record no longer lists the file: a harness
    // that deletes the candidate folder and makes it again at the same path.
    if (h && (h->overlay != overlay || !reg_.still_holds(overlay, p))) {
      if (!force && h->overlay != overlay && reg_.still_holds(h->overlay, p))
        throw Error(p.string() + " is held by overlay " + h->overlay.string() +
                    " (revert it first, stack on it with --over " + h->overlay.string() + ", or pass --force)");
      if (auto o = reg_.lost_original(p, *h)) {
        if (!force)
          throw Error(p.string() + " was changed by " + o->describe() +
                      ": revert that overlay where it is now, restore the file, or pass --force to take its current "
                      "bytes as the original");
        claim.warnings.push_back("taking over " + p.string() + " from " + o->describe() +
                                 ": the original bytes are lost; what it holds now is backed up as the original");
      } else if (auto below = reg_.live_under(p, *h, overlay); below && !force) {
        // The top vanished after putting back the bytes below it: the layer under it still holds.
        throw Error(p.string() + " is held by overlay " + below->string() + " (under " + h->overlay.string() +
                    ", which has vanished): revert it first, stack on it with --over " + below->string() +
                    ", or pass --force");
      }
    }
    claim.previous.emplace_back(p, h);
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& [p, before] = claim.previous[i];
    // Stacked on another overlay (--over, or taken over with --force): the overlays whose changes
    // this one stacks on stay named under it, each with its checksums. An artifact's original is
    // noted from its backup (note_entry): never read twice.
    Hold now{overlay,
             {},
             files[i].artifact ? std::nullopt : sha_now(reg_.disk(), p),
             files[i].patched_sha256.value_or(""),
             files[i].artifact,
             {},
             {}};
    if (layer[i] && (!before || before->overlay != *over)) {
      // The registry lost the lower's hold (or names a vanished one above it): the lower is named
      // from its record, its checksums unknown here.
      now.under.push_back({*over, std::nullopt, std::nullopt});
    } else if (before && before->overlay != overlay) {
      now.under.push_back({before->overlay, before->original_sha256, before->patched_sha256});
      now.under.insert(now.under.end(), before->under.begin(), before->under.end());
    } else if (before && reg_.still_holds(overlay, p)) {
      now.under = before->under;
      now.original_sha256 = before->original_sha256;  // stacked on itself: the original stays the first one
    }
    reg_.write_hold(p, now);
  }
  return claim;
}

}  // namespace

HoldClaim claim_files(HoldRegistry& holds, const std::vector<HeldFile>& files, const fs::path& overlay, bool force,
                      double lock_timeout, const std::optional<fs::path>& over, ManifestCache* records) {
  std::optional<ManifestCache> own;
  if (records == nullptr) records = &own.emplace(holds.disk());
  return Claimer(holds, *records).acquire(files, overlay, force, lock_timeout, over);
}

std::optional<std::string> why_taken(HoldRegistry& holds, ManifestCache& records, const fs::path& path,
                                     const fs::path& overlay, const std::optional<fs::path>& over) {
  return Claimer(holds, records).why_taken(path, overlay, over);
}

std::optional<std::string> held_by_two(HoldRegistry& holds, ManifestCache& records, const std::vector<fs::path>& paths,
                                       const fs::path& overlay) {
  return Claimer(holds, records).held_by_two(paths, overlay);
}

// --- The two locks, and both sides recorded -------------------------------------------------

// The claim judged the lower's record before its lock was held: deleted, moved or reverted in
// between (found by the claims checker: the accepted overlay rm -rf'd there), its bytes may be in
// place with their backup gone, and backing them up as this entry's original would lose the
// original unsaid.
void require_lower_records(const HoldClaim& claim, const std::optional<Manifest>& lower, const fs::path& lower_dir) {
  for (const auto& p : claim.layered)
    if (!lower || !recorded_change(*lower, p.string()))
      throw Error(
          p.string() + ": overlay " + lower_dir.string() +
          " no longer records a change to it (deleted, moved or reverted while this add-native claimed the file); "
          "nothing changed: look at `overlay status --all`, then run it again");
}

std::vector<std::string> record_layers(Disk& disk, const fs::path& lower_dir, Manifest& lower, const fs::path& overlay,
                                       const Manifest& ours, NativeEntry& e) {
  std::vector<std::string> paths;
  auto stack = [&](const std::string& path, std::optional<LayerRef>& layer, const std::string& found) {
    if (recorded_change(ours, path)) return;
    auto c = recorded_change(lower, path);
    if (!c) return;
    if (c->after && *c->after != found)
      throw Error(path + " holds other bytes than the change of overlay " + lower_dir.string() + " (entry " + c->entry +
                  ") left there (sha256 " + (found.empty() ? std::string("none: missing") : found.substr(0, 16)) +
                  ", not " + (c->after->empty() ? std::string("missing") : c->after->substr(0, 16)) +
                  "): changed since; revert that overlay or restore its bytes first");
    layer = LayerRef{lower_dir.string(), c->entry, c->pristine};
    paths.push_back(path);
  };
  for (auto& s : e.sources) stack(s.install_path, s.layer, s.sha256);
  for (auto& c : e.created) stack(c.path, c.layer, "");
  for (auto& a : e.artifacts) stack(a.path, a.layer, a.existed ? a.sha256 : "");
  for (auto& c : e.caches) stack(c.dir, c.layer, "");
  if (paths.empty()) return paths;
  lower.layers_above.push_back(UpperRef{overlay.string(), e.id, paths});
  save_manifest(disk, lower_dir, lower);
  return paths;
}

// --- The unwind's records ---------------------------------------------------------------------

bool stacks_on(const UpperRef& u, const std::set<std::string>& paths) {
  return std::any_of(u.paths.begin(), u.paths.end(), [&](const std::string& p) { return paths.count(p) != 0; });
}

bool prune_uppers(const std::vector<Upper>& ups, Manifest& m) {
  std::set<std::string> paths;
  for (const auto& e : m.natives)
    for (auto& p : tracked_paths(e)) paths.insert(std::move(p));
  std::size_t before = m.layers_above.size();
  std::erase_if(m.layers_above, [&](const UpperRef& r) {
    auto u = std::find_if(ups.begin(), ups.end(), [&](const Upper& x) { return x.ref == r; });
    return !stacks_on(r, paths) || (u != ups.end() && u->state == RefState::stale);
  });
  return m.layers_above.size() != before;
}

void leave_lowers(Disk& disk, const NativeEntry& e, double lock_timeout) {
  std::set<std::string> lowers;
  for (const auto& p : tracked_paths(e))
    if (const LayerRef* l = layer_of(e, p)) lowers.insert(l->overlay);
  for (const auto& lower : lowers) {
    try {
      if (!disk.info(fs::path(lower) / kManifestName, Follow::no).exists()) continue;
      OverlayLock lock(lower, lock_timeout);
      auto lm = load_manifest(disk, lower);
      if (!lm || std::erase_if(lm->layers_above, [&](const UpperRef& r) { return r.entry == e.id; }) == 0) continue;
      save_manifest(disk, lower, *lm);
    } catch (const Error& err) {
      spdlog::warn("cannot drop layer {} from {}: {}", e.id, lower, err.what());
    }
  }
}

}  // namespace overlay
