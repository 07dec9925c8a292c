// The subcommands, one row each: name, alias, the line --help shows, and the setup that adds its
// flags and returns its handler (defined in the file named beside it). main() registers only the
// row the command line names (start-up: building every parser was most of `--version`'s cost),
// and derives the names it recognises from this table.
#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {

// python_commands.cpp
Handler add_module_command(CLI::App& sub, const Globals& g);
Handler add_rebind_command(CLI::App& sub, const Globals& g);
Handler add_capture_command(CLI::App& sub, const Globals& g);
Handler add_marker_command(CLI::App& sub, const Globals& g);
Handler add_hook_command(CLI::App& sub, const Globals& g);
Handler add_triton_launch_probe_command(CLI::App& sub, const Globals& g);
Handler add_installer_command(CLI::App& sub, const Globals& g);
Handler merge_command(CLI::App& sub, const Globals& g);
Handler ensure_overlay_command(CLI::App& sub, const Globals& g);
Handler add_worker_modules_command(CLI::App& sub, const Globals& g);
Handler sitecustomize_text_command(CLI::App& sub, const Globals& g);
Handler check_command(CLI::App& sub, const Globals& g);
// native_commands.cpp
Handler add_native_command(CLI::App& sub, const Globals& g);
Handler apply_command(CLI::App& sub, const Globals& g);
Handler verify_native_command(CLI::App& sub, const Globals& g);
Handler revert_command(CLI::App& sub, const Globals& g);
Handler gc_stale_command(CLI::App& sub, const Globals& g);
// status_command.cpp
Handler status_command(CLI::App& sub, const Globals& g);
Handler which_command(CLI::App& sub, const Globals& g);
// discover_command.cpp, engaged_command.cpp, exec_command.cpp
Handler discover_command(CLI::App& sub, const Globals& g);
Handler engaged_command(CLI::App& sub, const Globals& g);
Handler exec_command(CLI::App& sub, const Globals& g);
// fleet_command.cpp
Handler fleet_command(CLI::App& sub, const Globals& g);
// layer_commands.cpp
Handler fold_command(CLI::App& sub, const Globals& g);
Handler export_command(CLI::App& sub, const Globals& g);
Handler replay_command(CLI::App& sub, const Globals& g);

namespace {

// clang-format off
const Command kCommands[] = {
  {"add-module", "copy-subtree", "Inject a patched Python module through the overlay", add_module_command},
  {"add-rebind", "monkeypatch", "Rebind one function (module:attr) to an implementation", add_rebind_command},
  {"add-capture", nullptr, "Record argument/return shapes of the first calls of a function", add_capture_command},
  {"add-marker", nullptr, "Wrap module:attr in a GEAK_TARGET::<target> profiler range (seam_trace.py)", add_marker_command},
  {"add-hook", nullptr, "Call impl_module.impl_attr() right after a module finishes importing", add_hook_command},
  {"add-triton-launch-probe", nullptr,
   "Annotate Triton launches with their shapes (the fork's probe: a hook on triton.runtime.jit)",
   add_triton_launch_probe_command},
  {"add-worker-modules", nullptr,
   "Write _overlay_apply.py and _overlay_worker_ext.py: TP workers started without the overlay's environment apply it",
   add_worker_modules_command},
  {"add-installer", nullptr, "Register a package's deferred installer (its files already in the overlay)", add_installer_command},
  {"merge", nullptr, "Compose overlays into a fresh one; conflicting entries or files refuse", merge_command},
  {"ensure-overlay", nullptr, "Create the overlay (manifest, sitecustomize.py) if missing; add nothing", ensure_overlay_command, true},
  {"sitecustomize-text", nullptr, "Print the sitecustomize.py this version writes", sitecustomize_text_command, true},
  {"check", nullptr, "Show where a module resolves from under the current PYTHONPATH", check_command},
  {"add-native", nullptr, "Back up, swap a compiled source in place, invalidate caches, rebuild", add_native_command},
  {"apply", nullptr, "Apply one diff routed per file: compiled files in place (one native entry), .py files as Python overlays", apply_command},
  {"verify-native", nullptr, "Check that every tracked artifact was rebuilt", verify_native_command},
  {"revert", nullptr, "Restore every native change of an overlay, byte-exact", revert_command},
  {"status", "list", "Show every entry and whether each tracked file is original, patched, rebuilt, drifted or missing", status_command},
  {"which", nullptr, "Which overlay (entry, patch) changed an installed file, like dpkg -S; read-only", which_command},
  {"fold", nullptr, "Accept a candidate: its native entries become another overlay's, no build (fold --from CAND --into ACCEPTED)", fold_command},
  {"export", nullptr, "Write an overlay's native changes as a bundle another install can replay", export_command},
  {"replay", nullptr, "Apply an exported bundle to an install (pristine files only), build and verify", replay_command},
  {"gc-stale", nullptr, "Revert every overlay under ROOT whose native changes are still applied", gc_stale_command},
  {"discover", nullptr, "Find the install's own builds that compile a file (read-only)", discover_command},
  {"engaged", nullptr, "Which running processes map the tracked artifacts (patched, stale or original) and run the Python entries", engaged_command},
  {"exec", nullptr, "One A/B step: [reference run,] apply + build + verify, candidate run, always revert, check clean", exec_command},
  {"fleet", nullptr, "One step on every node of a multi-node deployment through Slurm: apply|exec|verify|revert|status, all or nothing", fleet_command},
};
// clang-format on

}  // namespace

std::span<const Command> command_table() { return kCommands; }

void register_commands(CLI::App& app, const Globals& g, Handler& run, const Wanted& want) {
  for (const Command& c : kCommands) {
    if (!want(c.name, c.alias != nullptr ? c.alias : "")) continue;
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    if (c.alias != nullptr) sub->alias(c.alias);
    if (c.hidden) sub->group("");
    Handler h = c.setup(*sub, g);
    std::string name = c.name;
    sub->callback([&run, h, name] { run = [h, name] { return guarded(name, h); }; });
  }
}

}  // namespace overlay::cli
