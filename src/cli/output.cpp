#include "output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "overlay/error.hpp"
#include "overlay/json_bytes.hpp"
#include "overlay/lease.hpp"
#include "overlay/owner.hpp"
#include "overlay/progress.hpp"
#include "overlay/recording_disk.hpp"

#include "commands.hpp"

namespace overlay::cli {

Disk& cli_disk() {
  static Disk* disk = [] {
    const char* trace = std::getenv("OVERLAY_DISK_TRACE");
    if (trace == nullptr || *trace == '\0') return &real_disk();
    // The tracer's own appends are the one write that does not go through Disk.
    int fd = ::open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return &real_disk();
    // $OVERLAY_DISK_TRACE_BYTES=1 adds the bytes of every write (the crash-state explorer replays them).
    const char* bytes = std::getenv("OVERLAY_DISK_TRACE_BYTES");
    RecordData what = bytes != nullptr && std::string(bytes) == "1" ? RecordData::bytes : RecordData::sizes;
    static RecordingDisk rec(real_disk(), what, [fd](const DiskOp& op) {
      std::string line = to_line(op) + "\n";
      (void)!::write(fd, line.data(), line.size());
    });
    return static_cast<Disk*>(&rec);
  }();
  return *disk;
}
namespace {
bool g_json = false;
bool g_fleet_node = false;
}  // namespace

void set_json_mode(bool on) { g_json = on; }
bool json_mode() { return g_json; }
void set_fleet_node(bool on) { g_fleet_node = on; }

nlohmann::json& result() {
  static nlohmann::json doc = nlohmann::json::object();
  return doc;
}

namespace {

// One line is one line: a control character in what it names (a file name holding a newline, a
// command line) is written escaped, so no name can print a line of its own ("install clean").
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += c;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

}  // namespace

void out_line(const std::string& s) {
  std::FILE* to = g_json ? stderr : stdout;
  std::fputs(one_line(s).c_str(), to);
  std::fputc('\n', to);
  std::fflush(to);
}

void err_line(const std::string& subcommand, const std::string& msg) {
  std::string one = msg;
  for (char& c : one)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "%s: %s\n", subcommand.c_str(), one.c_str());
  std::fflush(stderr);
}

void emit_json(const std::string& subcommand, int rc, const std::string& error) {
  if (!g_json) return;
  nlohmann::json doc = {{"schema", kJsonSchema}, {"command", subcommand}, {"ok", rc == kOk}, {"exit", rc}};
  if (!error.empty()) doc["error"] = error;
  for (auto& [k, v] : result().items())
    if (!doc.contains(k)) doc[k] = v;
  if (rc != kOk && !doc.contains("error")) doc["error"] = "exit status " + std::to_string(rc);
  if (g_fleet_node) {
    std::string name = node_name_here();
    doc["node"] = name.empty() ? this_host() : name;
  }
  // Paths are bytes on Linux: a byte that is not UTF-8 is written as Python writes it ("\udcXX"),
  // so an agent's json.loads gives back a str that os.fsencode turns into the very path.
  std::string text = dump_json_bytes(doc, g_fleet_node ? -1 : 2);
  std::fputs(text.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int guarded(const std::string& subcommand, const std::function<int()>& body) {
  int rc = kFailed;
  std::string error;
  try {
    rc = body();
  } catch (const LockTimeout& e) {
    error = e.what();
    rc = kLockTimeout;
  } catch (const std::exception& e) {
    error = e.what();
    rc = kFailed;
  }
  if (!error.empty()) err_line(subcommand, error);
  emit_json(subcommand, rc, error);
  return rc;
}

namespace {

std::string mib(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1u << 20));
  return buf;
}

void draw_progress(const std::string& what, std::uint64_t done, std::uint64_t total, bool finished) {
  if (finished) {
    std::fputs("\r\033[K", stderr);  // leave no half line behind for the next message
  } else if (total > 0) {
    std::fprintf(stderr, "\r\033[K%s  %3d%%  %s of %s", what.c_str(),
                 static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)), mib(done).c_str(),
                 mib(total).c_str());
  } else {
    std::fprintf(stderr, "\r\033[K%s  %s", what.c_str(), mib(done).c_str());
  }
  std::fflush(stderr);
}

}  // namespace

void install_progress_line() {
  const char* term = std::getenv("TERM");
  if (::isatty(STDERR_FILENO) != 1 || (term && std::string(term) == "dumb")) return;
  set_progress_sink(draw_progress);
}

bool stderr_is_fancy() {
  const char* no_color = std::getenv("NO_COLOR");
  return ::isatty(STDERR_FILENO) == 1 && !(no_color && *no_color);
}

}  // namespace overlay::cli
