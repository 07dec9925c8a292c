// overlay: deploy an optimised kernel into a live install in place, and restore every byte.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "overlay/lock.hpp"
#include "overlay/traced_build.hpp"

#include "commands.hpp"
#include "fleet_engine.hpp"
#include "output.hpp"

namespace {

void setup_logging(int verbose, bool quiet) {
  using overlay::cli::stderr_is_fancy;
  auto logger =
      spdlog::stderr_color_mt("overlay", stderr_is_fancy() ? spdlog::color_mode::automatic : spdlog::color_mode::never);
  logger->set_pattern("overlay: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  auto level = spdlog::level::warn;
  if (const char* env = std::getenv("OVERLAY_LOG_LEVEL")) level = spdlog::level::from_str(env);
  if (verbose == 1) level = spdlog::level::info;
  if (verbose >= 2) level = spdlog::level::debug;
  if (quiet) level = spdlog::level::err;
  spdlog::set_level(level);
}

// The subcommand that was being parsed when CLI11 failed, for the error prefix.
std::string failing_name(const CLI::App& app) {
  for (const auto* sub : app.get_subcommands()) return sub->get_name();
  return "overlay";
}

// --json seen anywhere before "--": a usage error must still answer with one JSON document.
bool asks_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") return false;
    if (a == "--json" || a == "--fleet-node") return true;
  }
  return false;
}

// What a failed parse says: CLI11's words, or, where no subcommand matched the word the user typed
// first (past the global flags), that word named as unknown ("A subcommand is required" named none).
std::string usage_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (app.get_subcommands().empty())
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--lock-timeout") ++i;  // the one global option that takes a value
      if (a == "--lock-timeout" || a.starts_with("-")) continue;
      return "unknown subcommand '" + std::string(a) + "' (overlay --help lists them)";
    }
  return std::string(e.what()) + " (see --help)";
}

bool asks_fleet_node(int argc, char** argv) {
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i)
    if (std::string_view(argv[i]) == "--fleet-node") return true;
  return false;
}

}  // namespace

namespace overlay::cli {

Wanted wanted_from(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--lock-timeout") {
      ++i;  // its value
      continue;
    }
    if (a == "--version") return {Wanted::Which::none, {}};
    if (a == "-h" || a == "--help" || a == "--") return {};
    if (a.starts_with("-")) continue;
    for (const Command& c : command_table())
      if (a == c.name || (c.alias != nullptr && a == c.alias)) return {Wanted::Which::one, std::string(a)};
    return {};
  }
  return {};
}

}  // namespace overlay::cli

int main(int argc, char** argv) {
  using namespace overlay::cli;
  // The one call that needs no parser at all (CLI11 answers --version by throwing).
  if (argc == 2 && std::string_view(argv[1]) == "--version") {
    std::puts("overlay " OVERLAY_VERSION);
    return 0;
  }
  // The tracer process a traced build runs under (traced_build.hpp): not a subcommand anyone types.
  if (argc > 1 && std::string_view(argv[1]) == "__trace-build") return overlay::build_tracer_main(argc - 1, argv + 1);
  overlay::set_tracer_program("/proc/self/exe");
  CLI::App app{"overlay: deploy a kernel into a live install in place and restore every byte", "overlay"};
  app.set_version_flag("--version", std::string("overlay ") + OVERLAY_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  int verbose = 0;
  bool quiet = false;
  add_lease_engines();  // before any owner is read: a fleet step's entries live as long as its lease
  Globals g;
  g.lock_timeout = overlay::default_lock_timeout();
  app.add_flag("-v,--verbose", verbose, "More log output on stderr (repeat for debug)");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");
  bool json = false;
  app.add_flag("--json", json, "Print one JSON document describing the result on stdout; human text goes to stderr");
  app.add_option("--lock-timeout", g.lock_timeout,
                 "Seconds to wait for another process's lock on the overlay (env OVERLAY_LOCK_TIMEOUT)")
      ->check(CLI::NonNegativeNumber);
  bool fleet_node = false;
  app.add_flag("--fleet-node", fleet_node,
               "A fleet node's run (set by overlay fleet): --json, one line naming the node")
      ->group("");
  for (int i = 0; i < argc; ++i) g.argv.emplace_back(argv[i]);
  std::function<int()> run;
  Wanted want = wanted_from(argc, argv);
  register_commands(app, g, run, want);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = usage_error(app, e, argc, argv);
    err_line(failing_name(app), msg);
    set_json_mode(asks_json(argc, argv));
    set_fleet_node(fleet_node || asks_fleet_node(argc, argv));
    emit_json(failing_name(app), kUsage, msg);
    return kUsage;
  }
  set_json_mode(json || fleet_node);
  set_fleet_node(fleet_node);
  setup_logging(verbose, quiet);
  if (!quiet) install_progress_line();
  return run ? run() : kUsage;
}
