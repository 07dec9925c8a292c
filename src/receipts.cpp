#include "overlay/receipts.hpp"

#include <sys/sysmacros.h>

#include <algorithm>
#include <sstream>

#include <spdlog/spdlog.h>

#include "overlay/copy_pipeline.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/owner.hpp"
#include "overlay/process_scan.hpp"

namespace overlay {
namespace {

using nlohmann::json;
constexpr std::size_t kMaxReceipt = 64u << 20;

bool under(const std::string& path, const fs::path& root) {
  std::string r = root.string();
  return path.size() > r.size() && path.compare(0, r.size(), r) == 0 && path[r.size()] == '/';
}

// "<pid>-<ticks>" at the start of a file or directory name; nothing when it is not one.
std::optional<std::pair<pid_t, std::uint64_t>> pid_and_ticks(const std::string& name) {
  std::istringstream in(name);
  long pid = 0;
  char dash = 0;
  std::uint64_t ticks = 0;
  if (!(in >> pid >> dash >> ticks) || dash != '-' || pid <= 0) return std::nullopt;
  return std::make_pair(static_cast<pid_t>(pid), ticks);
}

// The processes of /proc with their parents, by pid: stat only, no maps (cheap for every process).
ProcessScan process_tree(Disk& disk) {
  ProcessScan all;
  for (const auto& e : disk.list_dir(fs::path("/proc"))) {
    if (e.name.empty() || e.name.size() > 9 || e.name.find_first_not_of("0123456789") != std::string::npos) continue;
    ProcessInfo p;
    p.pid = static_cast<pid_t>(std::stol(e.name));
    try {
      if (parse_proc_stat(read_small_file(disk, fs::path("/proc") / e.name / "stat", 4096), p.ppid, p.start_ticks))
        all.processes.push_back(p);
    } catch (const std::exception&) {
      continue;  // gone meanwhile: not in the tree
    }
  }
  std::sort(all.processes.begin(), all.processes.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return all;
}

std::optional<MappedFile> runtime_mapping(const json& m) {
  if (!m.is_array() || m.size() != 3 || !m[0].is_string() || !m[1].is_string() || !m[2].is_number_unsigned())
    return std::nullopt;
  std::string line = "0-0 r--p 0 " + m[1].get<std::string>() + " " + std::to_string(m[2].get<std::uint64_t>()) + " " +
                     m[0].get<std::string>();
  MappedFile f;
  return parse_maps_line(line, f) ? std::optional<MappedFile>(f) : std::nullopt;
}

}  // namespace

const char* to_string(CodeIs c) {
  switch (c) {
    case CodeIs::candidate:
      return "candidate";
    case CodeIs::original:
      return "original";
    case CodeIs::other:
      return "other";
    case CodeIs::unknown:
      return "unknown";
  }
  return "?";
}

bool ProcessReceipt::ran_candidate() const {
  return std::any_of(files.begin(), files.end(), [](const ReceiptFile& f) { return f.candidate; }) ||
         std::any_of(artifacts.begin(), artifacts.end(),
                     [](const ReceiptArtifact& a) { return a.is == CodeIs::candidate; });
}

ReceiptCollector::ReceiptCollector(Disk& disk, fs::path dir, const std::vector<std::string>& artifacts)
    : disk_(disk), dir_(std::move(dir)) {
  make_dirs(disk_, dir_, 0700);
  for (const auto& a : artifacts) {
    watched_.emplace(a, a);
    try {
      watched_.emplace(disk_.real_path(a).string(), a);
    } catch (const std::exception&) {
      continue;  // not there (yet): its own spelling is the one maps would use
    }
  }
}

ProcessReceipt& ReceiptCollector::process(pid_t pid, std::uint64_t ticks) {
  ProcessReceipt& p = seen_[{pid, ticks}];
  p.pid = pid;
  p.start_ticks = ticks;
  return p;
}

void ReceiptCollector::add_mapping(ProcessReceipt& p, const std::string& mapped, dev_t dev, ino_t ino) {
  auto w = watched_.find(mapped);
  if (w == watched_.end()) return;
  for (const auto& a : p.artifacts)
    if (a.path == w->second && a.dev == dev && a.ino == ino) return;
  ReceiptArtifact a;
  a.path = w->second;
  a.dev = dev;
  a.ino = ino;
  p.artifacts.push_back(a);
}

void ReceiptCollector::sample(pid_t root) {
  try {
    ++samples_;
    ProcessScan tree = process_tree(disk_);
    for (const ProcessInfo* t : tree.with_descendants({root})) {
      std::string maps, cmdline;
      fs::path dir = fs::path("/proc") / std::to_string(t->pid);
      try {
        maps = read_small_file(disk_, dir / "maps", kMaxReceipt);
        cmdline = read_small_file(disk_, dir / "cmdline", kMaxReceipt);
      } catch (const std::exception&) {
        continue;  // exited meanwhile (or another user's): the runtime's receipt may still say
      }
      ProcessReceipt& p = process(t->pid, t->start_ticks);
      p.ppid = t->ppid;
      p.sampled = true;
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      if (p.cmdline.empty()) p.cmdline = cmdline.substr(0, cmdline.find_last_not_of(' ') + 1);
      std::istringstream lines(maps);
      for (std::string l; std::getline(lines, l);)
        if (MappedFile f; parse_maps_line(l, f)) add_mapping(p, f.path, f.dev, f.ino);
    }
  } catch (const std::exception& e) {
    spdlog::debug("receipts: a sample of the run's processes failed: {}", e.what());  // the next tick tries again
  }
}

void ReceiptCollector::read_runtime_receipt(const fs::path& file, RunReceipts& out) {
  auto id = pid_and_ticks(file.filename().string());
  if (!id) return;
  ProcessReceipt& p = process(id->first, id->second);
  p.by_runtime = true;
  std::istringstream lines(read_small_file(disk_, file, kMaxReceipt));
  for (std::string l; std::getline(lines, l);) {
    json j = json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      out.problems.push_back(file.string() + ": a line that is not JSON (the process was killed while writing it)");
      continue;
    }
    if (j.contains("ppid") && j["ppid"].is_number_integer()) p.ppid = j["ppid"].get<pid_t>();
    if (j.contains("argv") && j["argv"].is_array() && p.cmdline.empty())
      for (const auto& a : j["argv"])
        if (a.is_string()) p.cmdline += (p.cmdline.empty() ? "" : " ") + a.get<std::string>();
    if (j.contains("overlay"))
      p.overlays.push_back({j.value("overlay", ""), j.value("manifest_sha256", ""),
                            j["sitecustomize_sha256"].is_string()
                                ? std::optional<std::string>(j["sitecustomize_sha256"].get<std::string>())
                                : std::nullopt});
    if (j.contains("file")) p.files.push_back({j.value("file", ""), j.value("sha256", ""), false});
    if (j.contains("maps") && j["maps"].is_array())
      for (const auto& m : j["maps"])
        if (auto f = runtime_mapping(m)) add_mapping(p, f->path, f->dev, f->ino);
  }
}

RunReceipts ReceiptCollector::finish() {
  RunReceipts out;
  out.samples = samples_;
  try {
    for (const auto& e : disk_.list_dir(dir_))
      if (e.name.size() > 6 && e.name.compare(e.name.size() - 6, 6, ".jsonl") == 0)
        read_runtime_receipt(dir_ / e.name, out);
  } catch (const std::exception& e) {
    out.problems.push_back("cannot read the runtime's receipts in " + dir_.string() + ": " + e.what());
  }
  std::map<std::pair<dev_t, ino_t>, std::optional<std::string>> digests;  // each inode hashed once
  for (auto& [id, p] : seen_) {
    for (auto& a : p.artifacts) {
      auto d = digests.find({a.dev, a.ino});
      if (d == digests.end()) {
        FileInfo now = disk_.info(a.path, Follow::yes);
        std::optional<std::string> sha;
        if (now.type == FileType::regular && now.dev == a.dev && now.ino == a.ino) sha = hash_file(disk_, a.path);
        d = digests.emplace(std::make_pair(a.dev, a.ino), sha).first;
      }
      a.sha256 = d->second;
    }
    out.processes.push_back(std::move(p));
  }
  seen_.clear();
  try {
    remove_tree(disk_, dir_);
  } catch (const std::exception& e) {
    out.problems.push_back("cannot remove " + dir_.string() + ": " + e.what());
  }
  return out;
}

CandidateCode candidate_code(Disk& disk, const fs::path& overlay, const Manifest& m) {
  CandidateCode c;
  c.overlay = overlay;
  for (const auto& e : m.natives)
    for (const auto& a : e.artifacts) {
      if (a.existed) c.original[a.path] = a.sha256;
      if (disk.info(a.path, Follow::yes).type == FileType::regular) c.built[a.path] = hash_file(disk, a.path);
    }
  return c;
}

void label(RunReceipts& r, const CandidateCode& code) {
  for (auto& p : r.processes) {
    for (auto& f : p.files) f.candidate = under(f.path, code.overlay);
    for (auto& a : p.artifacts) {
      auto orig = code.original.find(a.path);
      auto built = code.built.find(a.path);
      if (!a.sha256)
        a.is = CodeIs::unknown;
      else if (orig != code.original.end() && *a.sha256 == orig->second)
        a.is = CodeIs::original;
      else if (built != code.built.end() && *a.sha256 == built->second)
        a.is = CodeIs::candidate;
      else
        a.is = orig == code.original.end() && built == code.built.end() ? CodeIs::unknown : CodeIs::other;
    }
  }
}

void to_json(json& j, const RunReceipts& r) {
  json procs = json::array();
  std::size_t ran = 0, python = 0, mapping = 0;
  for (const auto& p : r.processes) {
    json files = json::array(), arts = json::array(), ovs = json::array(), seen = json::array();
    for (const auto& f : p.files) files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"candidate", f.candidate}});
    for (const auto& a : p.artifacts)
      arts.push_back({{"path", a.path},
                      {"sha256", a.sha256 ? json(*a.sha256) : json(nullptr)},
                      {"is", to_string(a.is)},
                      {"dev", static_cast<std::uint64_t>(a.dev)},
                      {"ino", static_cast<std::uint64_t>(a.ino)}});
    for (const auto& o : p.overlays)
      ovs.push_back({{"root", o.root},
                     {"manifest_sha256", o.manifest_sha256},
                     {"sitecustomize_sha256", o.sitecustomize_sha256 ? json(*o.sitecustomize_sha256) : json(nullptr)}});
    if (p.by_runtime) seen.push_back("runtime");
    if (p.sampled) seen.push_back("maps");
    procs.push_back({{"pid", p.pid},
                     {"ppid", p.ppid},
                     {"start_ticks", p.start_ticks},
                     {"cmdline", p.cmdline},
                     {"seen_by", seen},
                     {"overlays", ovs},
                     {"files", files},
                     {"artifacts", arts},
                     {"ran_candidate", p.ran_candidate()}});
    ran += p.ran_candidate() ? 1 : 0;
    python += p.by_runtime ? 1 : 0;
    mapping += p.artifacts.empty() ? 0 : 1;
  }
  j = {{"processes", procs},
       {"summary",
        {{"processes", r.processes.size()},
         {"ran_candidate", ran},
         {"with_runtime_receipt", python},
         {"mapping_tracked_artifacts", mapping},
         {"samples", r.samples}}},
       {"problems", r.problems}};
}

void sweep_receipt_dirs(Disk& disk, const fs::path& parent) {
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(parent);
  } catch (const DiskError& err) {
    if (err.code() != ENOENT) spdlog::debug("receipts: cannot list {}: {}", parent.string(), err.what());
    return;  // none yet: nothing left by anyone
  }
  for (const auto& e : entries) {
    auto id = pid_and_ticks(e.name);
    if (!id) continue;
    auto p = read_process(disk, id->first);
    if (p && p->start_ticks == id->second) continue;  // its exec still runs
    try {
      remove_tree(disk, parent / e.name);
    } catch (const std::exception& err) {
      spdlog::debug("receipts: cannot remove {}: {}", (parent / e.name).string(),
                    err.what());  // the next exec tries again
    }
  }
}

}  // namespace overlay
