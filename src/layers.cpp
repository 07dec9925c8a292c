#include "overlay/layers.hpp"

#include <algorithm>
#include <set>

#include "overlay/error.hpp"

namespace overlay {

const std::optional<Manifest>& ManifestCache::get(const std::string& overlay) {
  auto it = cache_.find(overlay);
  if (it != cache_.end()) return it->second.first;
  std::pair<std::optional<Manifest>, bool> v{std::nullopt, false};
  try {
    v.first = load_manifest(disk_, overlay);
  } catch (const Error&) {
    v.second = true;  // there, but not a record anyone can read
  }
  return cache_.emplace(overlay, std::move(v)).first->second.first;
}

bool ManifestCache::unreadable(const std::string& overlay) {
  get(overlay);
  return cache_[overlay].second;
}

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

}  // namespace overlay
