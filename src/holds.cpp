#include "overlay/holds.hpp"
#include "overlay/json_bytes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/hash.hpp"
#include "overlay/lock.hpp"
#include "overlay/manifest.hpp"

namespace overlay {

fs::path HoldRegistry::default_state_dir() {
  if (const char* s = std::getenv("OVERLAY_STATE_DIR"); s && *s) return s;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return fs::path(x) / "overlay";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".local/state/overlay";
  return fs::path("/tmp") / ("overlay-state-" + std::to_string(::getuid()));
}

fs::path HoldRegistry::hold_file(const fs::path& path) const { return dir_ / (sha256_hex(path.string()) + ".json"); }

namespace {

// The overlays a hold record names: the holder first, then those under it.
std::vector<fs::path> named_overlays(const json& j) {
  std::vector<fs::path> out;
  if (j.contains("overlay") && j["overlay"].is_string()) out.emplace_back(j["overlay"].get<std::string>());
  if (j.contains("under") && j["under"].is_array())
    for (const auto& u : j["under"])
      if (u.is_string()) out.emplace_back(u.get<std::string>());
  return out;
}

}  // namespace

std::optional<Hold> HoldRegistry::hold_of(const fs::path& path) {
  fs::path f = hold_file(path);
  if (disk_.info(f, Follow::no).type != FileType::regular) return std::nullopt;
  try {
    json j = parse_json_bytes(read_small_file(disk_, f, 1 << 16));
    if (j.value("path", "") != path.string() || !j.contains("overlay") || !j["overlay"].is_string()) return std::nullopt;
    std::vector<fs::path> all = named_overlays(j);
    return Hold{all.front(), std::vector<fs::path>(all.begin() + 1, all.end())};
  } catch (const std::exception&) {
    return std::nullopt;  // an unreadable hold holds nothing
  }
}

std::optional<fs::path> HoldRegistry::holder(const fs::path& path) {
  auto h = hold_of(path);
  return h ? std::optional<fs::path>(h->overlay) : std::nullopt;
}

std::vector<fs::path> HoldRegistry::overlays() {
  std::vector<fs::path> out;
  if (disk_.info(dir_, Follow::no).type != FileType::directory) return out;
  for (const auto& e : disk_.list_dir(dir_)) {
    if (e.name.size() < 5 || e.name.compare(e.name.size() - 5, 5, ".json") != 0) continue;
    try {
      json j = parse_json_bytes(read_small_file(disk_, dir_ / e.name, 1 << 16));
      for (auto& o : named_overlays(j)) out.push_back(std::move(o));
    } catch (const std::exception&) {
      // an unreadable hold names nothing
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {
bool records_change_to(const Manifest& m, const fs::path& path) {
  return std::any_of(m.natives.begin(), m.natives.end(), [&](const NativeEntry& e) {
    return std::any_of(e.sources.begin(), e.sources.end(), [&](const SourceItem& s) { return s.install_path == path.string(); });
  });
}
}  // namespace

bool HoldRegistry::still_holds(const fs::path& ov, const fs::path& path) {
  try {
    auto m = load_manifest(disk_, ov);
    return m && records_change_to(*m, path);
  } catch (const Error&) {
    return true;  // cannot tell: refusing is the safe side
  }
}

void HoldRegistry::write_hold(const fs::path& p, const Hold& hold) {
  // Written atomically but not fsynced: a hold lost to a power cut only loses a convenience
  // check, and two fsyncs per add-native are a measurable share of a small A/B cycle.
  json j = {{"path", p.string()}, {"overlay", hold.overlay.string()}};
  if (!hold.under.empty()) {
    j["under"] = json::array();
    for (const auto& u : hold.under) j["under"].push_back(u.string());
  }
  fs::path tmp = hold_file(p);
  tmp += ".tmp";
  auto out = disk_.create(tmp, 0644, CreateMode::truncate);
  std::string text = dump_json_bytes(j) + "\n";
  out->write(text.data(), text.size());
  out->close();
  disk_.rename(tmp, hold_file(p));
}

std::vector<std::unique_ptr<OverlayLock>> HoldRegistry::lock_paths(const std::vector<fs::path>& paths, double lock_timeout) {
  std::vector<std::string> names;
  for (const auto& p : paths) names.push_back(p.string());
  std::sort(names.begin(), names.end());  // one order for every claim: no deadlock
  names.erase(std::unique(names.begin(), names.end()), names.end());
  fs::path dir = dir_.parent_path() / "hold-locks";
  make_dirs(disk_, dir, 0700);
  std::vector<std::unique_ptr<OverlayLock>> held;
  for (const auto& p : names) {
    fs::path lock = dir / sha256_hex(p);
    disk_.make_dir(lock, 0700);
    held.push_back(std::make_unique<OverlayLock>(lock, lock_timeout, p + " (another add-native taking it)"));
  }
  return held;
}

HoldClaim HoldRegistry::acquire(const std::vector<fs::path>& paths, const fs::path& overlay, bool force, double lock_timeout) {
  make_dirs(disk_, dir_, 0700);
  HoldClaim claim;
  claim.locks = lock_paths(paths, lock_timeout);
  OverlayLock lock(dir_, lock_timeout);
  for (const auto& p : paths) {
    auto h = hold_of(p);
    if (!force && h && h->overlay != overlay && still_holds(h->overlay, p))
      throw Error(p.string() + " is held by overlay " + h->overlay.string() + " (revert it first, or pass --force)");
    claim.previous.emplace_back(p, h);
  }
  for (const auto& [p, before] : claim.previous) {
    // Taken over with --force: the overlays whose changes this one stacks on stay named under it.
    Hold now{overlay, {}};
    if (before && before->overlay != overlay) {
      now.under.push_back(before->overlay);
      now.under.insert(now.under.end(), before->under.begin(), before->under.end());
    } else if (before) {
      now.under = before->under;
    }
    write_hold(p, now);
  }
  return claim;
}

void HoldRegistry::give_back(const HoldClaim& claim, const fs::path& overlay, double lock_timeout) {
  OverlayLock lock(dir_, lock_timeout);
  for (const auto& [p, before] : claim.previous) {
    auto h = holder(p);
    if (!h || *h != overlay || (before && before->overlay == overlay)) continue;
    if (before)
      write_hold(p, *before);
    else
      disk_.remove(hold_file(p));
  }
}

void HoldRegistry::release(const std::vector<fs::path>& paths, const fs::path& overlay, const Manifest& recorded,
                           double lock_timeout) {
  if (disk_.info(dir_, Follow::no).type != FileType::directory) return;
  OverlayLock lock(dir_, lock_timeout);
  for (const auto& p : paths) {
    auto h = hold_of(p);
    if (!h || h->overlay != overlay || records_change_to(recorded, p)) continue;
    // The nearest overlay under it whose change to p is still on record holds p again.
    auto next = std::find_if(h->under.begin(), h->under.end(), [&](const fs::path& u) { return u != overlay && still_holds(u, p); });
    if (next == h->under.end())
      disk_.remove(hold_file(p));
    else
      write_hold(p, Hold{*next, std::vector<fs::path>(next + 1, h->under.end())});
  }
}

}  // namespace overlay
