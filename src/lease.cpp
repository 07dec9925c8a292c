#include "overlay/lease.hpp"

#include <algorithm>

namespace overlay {
namespace {

std::vector<const LeaseEngine*>& engines() {
  static std::vector<const LeaseEngine*> all;
  return all;
}

bool valid_engine_name(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(),
                                   [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

constexpr std::string_view kKeySuffix = "_job";

}  // namespace

void add_lease_engine(const LeaseEngine& engine) {
  if (find_lease_engine(engine.name()) == nullptr) engines().push_back(&engine);
}

const std::vector<const LeaseEngine*>& lease_engines() { return engines(); }

const LeaseEngine* find_lease_engine(std::string_view name) {
  for (const LeaseEngine* e : engines())
    if (e->name() == name) return e;
  return nullptr;
}

std::optional<Lease> lease_here() {
  for (const LeaseEngine* e : engines())
    if (std::string id = e->lease_here(); !id.empty()) return Lease{e->name(), id};
  return std::nullopt;
}

LeaseState lease_state(const Lease& lease) {
  const LeaseEngine* e = find_lease_engine(lease.engine);
  return e == nullptr ? LeaseState::unknown : e->state(lease.id);
}

std::string describe_lease(const Lease& lease) {
  const LeaseEngine* e = find_lease_engine(lease.engine);
  return e == nullptr ? lease.engine + " lease " + lease.id : e->describe(lease.id);
}

std::string node_name_here() {
  for (const LeaseEngine* e : engines())
    if (std::string n = e->node_name(); !n.empty()) return n;
  return {};
}

bool is_engine_variable(std::string_view var) {
  return std::any_of(engines().begin(), engines().end(), [&](const LeaseEngine* e) {
    std::string p = e->env_prefix();
    return !p.empty() && var.starts_with(p);
  });
}

std::string lease_key(const Lease& lease) { return lease.engine + std::string(kKeySuffix); }

std::optional<std::string> engine_of_lease_key(std::string_view key) {
  if (!key.ends_with(kKeySuffix)) return std::nullopt;
  std::string_view stem = key.substr(0, key.size() - kKeySuffix.size());
  if (!valid_engine_name(stem)) return std::nullopt;
  return std::string(stem);
}

std::string lease_text(const Lease& lease) {
  bool first = !engines().empty() && engines().front()->name() == lease.engine;
  return first && lease.id.find(':') == std::string::npos ? lease.id : lease.engine + ":" + lease.id;
}

std::optional<Lease> parse_lease_text(std::string_view text) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) {  // a bare id: the first engine's (no engine added: nothing it could name)
    if (text.empty() || engines().empty()) return std::nullopt;
    return Lease{engines().front()->name(), std::string(text)};
  }
  std::string_view engine = text.substr(0, colon), id = text.substr(colon + 1);
  if (!valid_engine_name(engine) || id.empty()) return std::nullopt;
  return Lease{std::string(engine), std::string(id)};
}

}  // namespace overlay
